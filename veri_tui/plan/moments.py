"""The backward's moments under FSDP2 (stages 2 and 3, cpu_offload): what the GPU holds at
each, as the bundled trainer's step on torch 2.13 holds it (traced on fake CUDA at real
shapes, docs/trace.md; the figures in docs/accuracy.md, The plan against the trace).

DDP's peak is the one peak.py sums (states, every activation, the logits and the loss).
Under FSDP2 the backward's peak is one of these moments, each summed here:

- the loss's backward: the states, every layer's keep, the root's keep, the logits with
  their gradient and the loss's fp32 chunk. Nothing gathered: at stage 3 FSDP2 reshards
  the root after its forward too (torch 2.13's fully_shard on the root module with
  reshard_after_forward=True), and at stage 2 the gathered copy is the states' own;
- the head's backward at stage 3: the root (embeddings, head, final norm) gathered again,
  and for that moment twice (the all-gather's output and the parameters it is copied out
  to), beside the logits' gradient and every layer's keep;
- a decoder layer's backward: the units in flight (memory.in_flight_bytes: the root, two
  layers, one layer's unsharded gradient), the head's unsharded gradient (a full
  fine-tune's: bf16, until the root's reduce-scatter ends the backward), the layer
  recomputed when checkpointed, and the keeps of the layers not yet run backward. Its first
  layer holds every layer's keep and no layer's gradient; its last, one layer's keep and
  the gradient shards of all the others. In between lies between (both are affine in the
  layer), so the larger of the two is the peak.

At stage 3 the forward competes too: its last layer's copy-out holds the root gathered
(FSDP2 keeps it through the forward), that layer's all-gather output and the parameters it
is copied out to, and the previous layer's all-gather output, which wait_for_unshard frees
only when it returns (torch 2.13: `prev_all_gather_state` keeps the deferred result alive
through the copy-out; a GPU's caching allocator frees on the same reference count), beside
the keeps of every layer before it. It is the peak when the backward is light: a mixture
of experts under LoRA (large gathered layers, no gradient of its base).

The states' gradient shards exist only once a backward has reduced them: the optimizer
zeroes them to None (veri_tui/trainer/step.py), so a step of one micro-batch starts its
backward without them; with accumulation, every later micro-batch has them all.
"""

from __future__ import annotations

from typing import Any

from veri_tui.plan.activations import ActivationModel, ActivationTerms
from veri_tui.plan.memory import COMPUTE_BYTES, MemoryEstimate, trained_weight_bytes
from veri_tui.plan.model_info import ModelInfo


def fsdp_terms(
    info: ModelInfo, est: MemoryEstimate, model: ActivationModel, terms: ActivationTerms,
    tokens: int,
) -> dict[str, int]:  # fmt: skip
    """The bytes the moments need, beside the activation estimate's (peak.estimate_peak)."""
    layers = max(info.layer_count, 1)
    root = info.embedding_parameters + info.lm_head_parameters + info.hidden_size
    lora = est.lora_rank > 0
    if lora:
        trained_per_layer = -(-info.adapter_parameters(est.lora_rank) // layers)
    else:
        trained_per_layer = (info.parameter_count - root) // layers
    shard = 0
    if not est.cpu_offload:  # offloaded gradient shards live on the host
        width = trained_weight_bytes(est.precision, est.lora_rank)
        shard = -(-trained_per_layer * width // max(est.data_parallel_size, 1))
    return {
        "keeps_bytes": terms.layers,
        "root_keep_bytes": terms.root,
        "loss_bytes": terms.logits,
        "recompute_bytes": terms.recompute,
        "layer_keep_bytes": tokens * max(kind.kept for kind in model.kinds),
        "logits_grad_bytes": 2 * info.vocab_size * tokens,
        "root_gather_bytes": COMPUTE_BYTES * root,
        "layer_gather_bytes": COMPUTE_BYTES * ((info.parameter_count - root) // layers),
        # The head's weight gradient (a tied head's is the embedding's: the same size).
        "head_grad_bytes": 0 if lora else COMPUTE_BYTES * info.vocab_size * info.hidden_size,
        "layer_grad_shard_bytes": shard,
        "layers": layers,
    }


def fsdp_moments(
    act: dict[str, Any], est: MemoryEstimate, accumulating: bool
) -> tuple[str, dict[str, int]]:
    """The largest of the moments (module docstring), "forward" or "backward", and the
    peak's parts there (states, activations, logits, in_flight); `accumulating`: a later
    micro-batch of several, whose forward and backward start with every gradient shard."""
    states = 0 if est.cpu_offload else est.states_bytes_per_gpu
    grads = 0 if est.cpu_offload else est.components.get("gradients", 0)
    base = states if accumulating else states - grads
    keeps, root_keep = act["keeps_bytes"], act["root_keep_bytes"]
    gathered_root = act["root_gather_bytes"] if est.zero_stage == 3 or est.cpu_offload else 0
    in_flight = act["in_flight_bytes"] + act["head_grad_bytes"]
    layers, keep = act["layers"], act["layer_keep_bytes"]
    later = 0 if accumulating else (layers - 1) * act["layer_grad_shard_bytes"]
    moments = [
        dict(states=base, activations=keeps + root_keep, logits=act["loss_bytes"], in_flight=0),
        dict(states=base, activations=keeps + root_keep, logits=act["logits_grad_bytes"],
             in_flight=2 * gathered_root),
        dict(states=base, activations=keeps + act["recompute_bytes"], logits=0,
             in_flight=in_flight),
        dict(states=base + later, logits=0, in_flight=in_flight,
             activations=keeps - (layers - 1) * keep + act["recompute_bytes"]),
    ]  # fmt: skip
    backward = max(moments, key=lambda m: sum(m.values()))
    if est.zero_stage != 3 or "layer_gather_bytes" not in act:
        return "backward", backward
    # The last layer's copy-out: every layer's keep but its own, three layers' gathered.
    forward = dict(states=base, activations=keeps - keep, logits=0,
                   in_flight=act["root_gather_bytes"] + 3 * act["layer_gather_bytes"])  # fmt: skip
    if sum(forward.values()) > sum(backward.values()):
        return "forward", forward
    return "backward", backward
