"""The peak memory per GPU of a step, by part: states, activations, logits and loss, the
FSDP2 units in flight, the optimizer step's temporary and the overhead outside tensors.

Shown beside the plan (the memory bar, the `memory:` line); never used by "auto", which
decides on the states alone (contracts section 3). Each part is what the bundled trainer
holds (docs/planning.md, Peak memory):

- in flight (FSDP2, veri_tui/trainer/parallelize.py): the root unit (embeddings, head, final norm)
  stays gathered from its forward to the end of backward (FSDP2 does not reshard the root
  after forward); at stage 3 two decoder layers are gathered at a time (the one computing
  and the one prefetched); a layer's gradient exists unsharded, in bf16 (and cast to fp32
  for an fp32 reduce), until its reduce-scatter. Stage 2 keeps every layer gathered, which
  the states already count (its compute copy); DDP's gradients are bucket views (states).
- the optimizer step, beside the states when the activations are gone: torch's AdamW
  (foreach, the default on CUDA) makes one fp32 temporary the size of the second moments
  (sqrt(v)); the bf16 full fine-tune's AdamW (veri_tui/trainer/adamw.py) is one compiled
  kernel with no temporary from SR_COMPILE_MIN_PARAMETERS parameters on, and below that works
  in batches of SR_CHUNK elements, SR_STEP_TEMP_BYTES each (joined bf16 inputs, fp32 working
  copies, random bits).
- eval (with eval_fraction or an eval_dataset; veri_tui/trainer/evaluate.py): a forward without
  gradients at the same micro-batch, holding the bf16 logits of its tokens and one fp32
  loss chunk beside the states and the units in flight (a layer's own transient outputs are
  freed as the next runs, and not counted); the peak when it is above the step's.
- overhead: the CUDA context, cuBLAS and NCCL workspaces and the caching allocator's slack
  outside the tensors: the 2 GiB the budget already reserves for them (gpus.RESERVE_BYTES).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veri_tui.jobfolder.canary.canary import KNOB_FOR_PART as CANARY_KNOBS
from veri_tui.jobfolder.knobs import CHECKPOINTING
from veri_tui.plan.activations import ActivationModel, ActivationTerms, sequence_length
from veri_tui.plan.gpus import GPU, RESERVE_BYTES
from veri_tui.plan.layout import Layout
from veri_tui.plan.losses import loss_chunk_bytes
from veri_tui.plan.memory import MemoryEstimate, in_flight_bytes, trained_weight_bytes
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.moments import fsdp_moments, fsdp_terms

if TYPE_CHECKING:
    from veri_tui.jobfolder.knobs.fields import Checkpointing

# veri_tui/trainer/adamw.py's CHUNK, STEP_TEMP_BYTES and COMPILE_MIN_PARAMETERS
# (tests/trainer/test_adamw.py checks they agree).
SR_CHUNK = 1 << 22
SR_STEP_TEMP_BYTES = 28
SR_COMPILE_MIN_PARAMETERS = 1 << 25
PARTS = ("states", "activations", "logits", "in_flight", "optimizer_step", "overhead")
# The knob that moves each part most, named beside the largest part (the app, `memory:`);
# jobfolder's: the canary's gate names it too.
KNOB_FOR_PART = CANARY_KNOBS


def optimizer_step_bytes(est: MemoryEstimate) -> int:
    """The optimizer step's temporary on this GPU (none when it runs on the host).

    torch's AdamW (fp32 master weights, fp32 LoRA adapters; foreach on CUDA): one sqrt(v)
    the size of the trainable share, fp32. The bf16 full fine-tune's stochastically rounded
    AdamW (veri_tui/trainer/adamw.py): on CUDA one compiled kernel per parameter (Triton, no
    temporary) for a model of SR_COMPILE_MIN_PARAMETERS or more, else eager batches,
    SR_STEP_TEMP_BYTES per element of at most SR_CHUNK elements of the share. (A GPU host
    without Triton runs the batches at any size: at most 0.12 GB, inside the 2 GiB reserve.)
    """
    if est.cpu_offload:
        return 0
    div = 1 if est.zero_stage == 0 else est.data_parallel_size
    share = -(-est.trainable_parameter_count // div)
    if est.precision == "bf16" and not est.lora_rank:
        if est.trainable_parameter_count >= SR_COMPILE_MIN_PARAMETERS:
            return 0
        return SR_STEP_TEMP_BYTES * min(share, SR_CHUNK)
    return trained_weight_bytes(est.precision, est.lora_rank) * share


def _peak_of(terms: ActivationTerms | None) -> int:
    """A mode's activation peak; 0 for a model without the widths to count one."""
    return terms.peak if terms is not None else 0


def estimate_peak(
    info: ModelInfo,
    gpu: GPU,
    est: MemoryEstimate,
    *,
    method: str,
    micro_batch_size: int,
    max_seq_length: int,
    max_length: int,
    activation_checkpointing: Checkpointing,
    packing: bool = False,
) -> dict[str, Any]:
    """The activation estimate (with and without checkpointing, the largest mbs that fits)
    and the step's peak per GPU by part (`packing`: the rows are packed, so attention gets
    a mask: activations.py). Keys kept from before: bytes_per_gpu (activations
    and logits at the peak), with/without_checkpointing_bytes, transient_gather_bytes."""
    seq = sequence_length(method, max_seq_length, max_length)
    known = info.hidden_size > 0 and info.vocab_size > 0
    tokens = micro_batch_size * seq
    lora, stage = est.lora_rank, est.zero_stage
    # fp32 trained weights (fp32 masters; LoRA's fp32 adapters in either precision) compute
    # under autocast at stage 0 (veri_tui/trainer/parallelize.py); FSDP2 gathers bf16 copies.
    autocast = (est.precision == "fp32" or lora > 0) and stage == 0
    lay = Layout.of(info)
    mask = seq if packing else 0
    models = {
        m: ActivationModel(lay, m, lora_rank=lora, autocast=autocast, mask_length=mask)
        for m in CHECKPOINTING
    }
    by_mode = {m: model.terms(tokens) if known else None for m, model in models.items()}
    terms = by_mode[activation_checkpointing]
    transient = 0 if est.cpu_offload else in_flight_bytes(
        info, zero_stage=stage, precision=est.precision, lora_rank=lora
    )  # fmt: skip
    if est.load_in_4bit:  # bitsandbytes dequantizes one NF4 weight at a time to bf16
        transient += 2 * max(i * o for i, o, _ in lay.linears()) if known else 0
    # With cpu_offload the states on the GPU are the units in flight (memory.py).
    in_flight = est.states_bytes_per_gpu if est.cpu_offload else transient
    fsdp = fsdp_terms(info, est, models[activation_checkpointing], terms, tokens) if terms else {}
    states = 0 if est.cpu_offload else est.states_bytes_per_gpu
    available = gpu.usable_bytes - states - in_flight
    current = terms.peak if terms else 0
    logits = 0
    if terms is not None and terms.phase != "layer":  # the logits are freed before layers
        logits = (
            terms.logits
            if terms.phase == "loss"
            else current - terms.layers - terms.root - terms.casts
        )
    return {
        "known": known,
        "sequence_length": seq,
        "micro_batch_size": micro_batch_size,
        "tokens_per_micro_batch": tokens,
        "activation_checkpointing": activation_checkpointing,
        "lora_rank": lora,
        "autocast": autocast,
        "mask_length": mask,
        "gradient_checkpointing": activation_checkpointing != "none",
        "bytes_per_gpu": current,
        "phase": terms.phase if terms else None,
        "with_checkpointing_bytes": _peak_of(by_mode["full"]),
        "selective_bytes": _peak_of(by_mode["selective"]),
        "without_checkpointing_bytes": _peak_of(by_mode["none"]),
        "logits_and_loss_bytes": terms.logits if terms else 0,
        "loss_chunk_bytes": loss_chunk_bytes(info.vocab_size, tokens) if known else 0,
        # The eval forward's logits (bf16) and one fp32 loss chunk (veri_tui/trainer/evaluate.py)
        "eval_forward_bytes": 2 * info.vocab_size * tokens
        + loss_chunk_bytes(info.vocab_size, tokens) if known else 0,
        "logits_at_peak_bytes": logits,
        "transient_gather_bytes": transient,
        "in_flight_bytes": in_flight,
        "available_bytes": available,
        "fits": known and current <= available,
        "max_micro_batch_size": models[activation_checkpointing].largest_micro_batch(
            seq, available
        ) if known else None,
        **fsdp,
    }  # fmt: skip


def peak_parts(
    act: dict[str, Any],
    est: MemoryEstimate,
    gpu: GPU,
    evaluating: bool = False,
    accumulating: bool = False,
) -> dict[str, Any]:
    """The step's peak per GPU by part, from the (calibrated) activation estimate: the
    backward's moment, or under FSDP2 its forward's or backward's (moments.py) (states,
    activations, logits, units in flight) or, when larger, the optimizer step's (states
    and AdamW's temporary) or, for a job that evaluates, the eval forward's (states, its
    logits and loss chunk, units in flight); plus the overhead."""
    parts = dict.fromkeys(PARTS, 0)
    states = 0 if est.cpu_offload else est.states_bytes_per_gpu
    current, logits = act["bytes_per_gpu"], act["logits_at_peak_bytes"]
    parts.update(states=states, overhead=RESERVE_BYTES)
    parts.update(activations=current - logits, logits=logits, in_flight=act["in_flight_bytes"])
    moment = "backward"
    if (est.zero_stage > 0 or est.cpu_offload) and "keeps_bytes" in act:  # FSDP2 (moments.py)
        moment, at = fsdp_moments(act, est, accumulating)
        parts.update(at)
    step = optimizer_step_bytes(est)
    if step > current + act["in_flight_bytes"]:  # the activations are gone by the step
        parts.update(activations=0, logits=0, in_flight=0, optimizer_step=step)
        moment = "optimizer step"
    eval_bytes = None
    if evaluating:
        forward = act.get("eval_forward_bytes", 0)
        eval_bytes = states + act["in_flight_bytes"] + forward
        if eval_bytes > sum(parts.values()) - RESERVE_BYTES:
            parts.update(activations=0, logits=forward, in_flight=act["in_flight_bytes"],
                         optimizer_step=0)  # fmt: skip
            moment = "eval"
    allocated = sum(parts.values()) - RESERVE_BYTES
    largest = max(PARTS[:-1], key=parts.__getitem__)
    return {
        "parts": parts,
        "allocated_bytes": allocated,
        "peak_bytes": allocated + RESERVE_BYTES,
        "memory_bytes": gpu.memory_bytes,
        "fits": allocated + RESERVE_BYTES <= gpu.memory_bytes,
        "largest": largest,
        "knob": KNOB_FOR_PART[largest],
        "moment": moment,  # forward, backward, optimizer step or eval: when the peak is reached
        "eval_bytes": eval_bytes,  # the eval forward's allocated bytes (None: no eval)
        "optimizer_step_bytes": step,  # AdamW's temporary, whichever moment is the peak
    }


PART_LABELS = {
    "states": "states",
    "activations": "activations",
    "logits": "logits",
    "in_flight": "in flight",
    "optimizer_step": "optimizer step",
    "overhead": "overhead",
}


def peak_line(peak: dict[str, Any]) -> str:
    """`memory: peak 21.3 GB/GPU of 24.0 GB = states 16.1 + activations 1.1 + ... ;
    largest: states (zero_stage, lora_rank or gpu_count)`."""
    parts = " + ".join(
        f"{PART_LABELS[k]} {v / 1e9:.1f}" for k, v in peak["parts"].items() if v or k == "states"
    )
    fit = "" if peak["fits"] else " (over the GPU's memory)"
    note = peak.get("calibration")
    if note:  # the overhead measured by canaries (calibration.py)
        fit += f" (overhead calibrated from {note['runs']} run{'s' * (note['runs'] != 1)})"
    return (
        f"memory: peak {peak['peak_bytes'] / 1e9:.1f} GB/GPU of {peak['memory_bytes'] / 1e9:.1f}"
        f" GB{fit} = {parts}; largest: {PART_LABELS[peak['largest']]} ({peak['knob']})"
    )
