"""The activation peak of one micro-batch: the per-token terms of activations.py summed over
the layers and weighed at the moments that compete for the peak.

Three moments (measured by tests/plan/test_saved_tensors.py, which finds the peak op by op):
- the end of the forward: everything kept, the logits, the loss's fp32 chunk, and under
  autocast its cast cache (a bf16 copy of every fp32 weight, alive until autocast exits);
- the start of backward: everything kept, the logits and their bf16 gradient, the chunk;
- the last layer's backward when checkpointed: the layers' keeps, that layer recomputed
  (its whole saved set), the gradient of its input and its MLP's gradients (2h + 4I).
Logits and the root are freed before the layers' backward; the batch and rotary tables are
alive throughout.
"""

from __future__ import annotations

from typing import NamedTuple

from veri_tui.plan.activations import (
    LOSS_KEPT_PER_TOKEN,
    POSITION_IDS,
    Layout,
    kept_per_layer,
    layer_saved,
    loss_chunk_bytes,
    mm_outputs,
    root_kept,
    selective_saved,
    shared_kept,
    stream_bytes,
)
from veri_tui.plan.model_info import ModelInfo


class ActivationTerms(NamedTuple):
    """The activation bytes of one micro-batch, by term, and its peak (the larger moment)."""

    layers: int  # what every layer keeps until its backward, the batch, the rotary tables
    root: int  # the final norm's and the head's
    logits: int  # the logits kept, their gradient, the loss's chunk and per-token state
    recompute: int  # a checkpointed layer recomputed in backward: gradients, recast weights
    casts: int  # autocast's bf16 weight copies (fp32 weights at stage 0)
    kept: int  # alive once the forward and the loss are done (autocast's cache cleared)
    peak: int
    phase: str  # "forward" (its end), "loss" (the loss's backward) or "layer" (the last
    # layer's backward, recomputed when checkpointed)


def autocast_weight_copies(info: ModelInfo, lora_rank: int = 0) -> int:
    """Autocast's bf16 copies of the fp32 matmul weights (the adapters' under LoRA), alive
    through the forward (its cast cache) and kept for backward by every matmul without
    checkpointing: 2 bytes per weight."""
    lay = Layout.of(info)
    total = 0
    for moe, count in ((False, lay.layers - lay.moe_layers), (True, lay.moe_layers)):
        for i, o, adapted in lay.linears(moe):
            if lora_rank:
                total += count * lora_rank * (i + o) * adapted
            else:
                total += count * i * o
    return 2 * (total + (0 if lora_rank else lay.vocab * lay.h))


def _layer_casts(lay: Layout, lora_rank: int, moe: bool) -> int:
    """The bf16 weight copies autocast makes again when one layer is recomputed (its mm
    weights, the adapters' under LoRA; grouped experts run in fp32, uncast)."""
    return 2 * sum(
        (lora_rank * (i + o) if lora_rank else i * o) * (a or not lora_rank)
        for i, o, a in lay.linears(moe)
    )


def _layer_sum(lay: Layout, tokens: int, **kw: object) -> int:
    """Bytes every layer keeps, dense and MoE layers each at their own figure."""
    dense = lay.layers - lay.moe_layers
    return tokens * (
        dense * kept_per_layer(lay, moe=False, **kw)  # type: ignore[arg-type]
        + lay.moe_layers * kept_per_layer(lay, moe=True, **kw)  # type: ignore[arg-type]
    )


def _recompute(lay: Layout, mode: str, tokens: int, lora_rank: int, autocast: bool) -> int:
    """A checkpointed layer recomputed in its backward, beyond what it keeps: its saved set,
    its input's and its MLP's gradients (2h + 4I; a MoE block's four per routed copy, 8h),
    autocast's recast weights (the larger of a dense and a MoE layer)."""
    out = 0
    kinds = [moe for moe, n in ((False, lay.layers - lay.moe_layers), (True, lay.moe_layers)) if n]
    for moe in kinds:
        saved = layer_saved(lay, lora_rank=lora_rank, autocast=autocast, moe=moe)
        cached = selective_saved(lay, lora_rank, moe) if mode == "selective" else 0
        grads = stream_bytes(lora_rank, autocast) * lay.h
        if moe:  # per routed copy four h-wide gradients (its output's, its input's, their
            # scatter and its zeros), its gate/up output (2I) freed by then; the grouped
            # experts run in fp32 under autocast
            b = 4 if autocast and not lora_rank else 2
            grads += (
                lay.info.experts_per_token * b * (4 * lay.h - 2 * lay.info.moe_intermediate_size)
            )
        else:
            grads += 4 * lay.info.intermediate_size
        if lora_rank and autocast:  # the fp32 casts of an adapter's input and its gradient
            grads += 4 * lay.info.intermediate_size
        outs = mm_outputs(lay, lora_rank, moe)
        if mode == "selective" and len(outs) % 2:
            grads += 2 * outs[-1]  # the last mm is cached: its output outlives its use
        casts = _layer_casts(lay, lora_rank, moe) if autocast else 0
        # Dense layers come first (DeepSeek's, the tiny MoE's layer 0): by the last dense
        # layer's backward the MoE layers after it have freed what they kept.
        later = 0 if moe else lay.moe_layers * tokens * kept_per_layer(
            lay, mode, lora_rank=lora_rank, autocast=autocast, moe=True
        )  # fmt: skip
        out = max(out, tokens * (saved - cached + grads) + casts - later)
    return out


class LossMemory(NamedTuple):
    """What a loss holds, in bytes per token per vocabulary entry, at the end of the forward,
    once it is computed (until backward) and at the start of backward; `chunked`: beside one
    fp32 chunk (LOSS_CHUNK_BYTES) and 13 bytes per token of labels, mask and log-sum-exp."""

    forward: int
    kept: int
    backward: int
    chunked: bool = False


# The bundled trainer's (veri_tui/trainer/losses.py), and others' as their code computes them (each
# measured on CPU by tests/plan/test_saved_tensors.py; they run benchmarks/ published rows):
LOSSES = {
    # bf16 logits kept; backward writes their bf16 gradient beside one fp32 chunk.
    "chunked": LossMemory(2, 2, 4, chunked=True),
    # F.cross_entropy on the bf16 logits, which are dropped before backward (torchtitan's
    # `del pred`): log_softmax keeps its bf16 output; backward, its gradient and the input's.
    "ce_bf16": LossMemory(4, 2, 6),
    # The same on an fp32 copy (`pred.float()`): the copy and log_softmax's fp32 output,
    # then three fp32 tensors in backward.
    "ce_fp32": LossMemory(10, 4, 12),
    # A transformers model's shifted CrossEntropyLoss under CUDA autocast, which runs
    # cross_entropy in fp32: with one sample per micro-batch the shift is a view (no copy),
    # then the fp32 cast and log_softmax's fp32 output; the logits are dropped before
    # backward (HF Trainer keeps only the loss).
    "ce_autocast_shifted": LossMemory(10, 4, 12),
    # The same without autocast on half-precision logits (fp16/bf16 all through).
    "ce_shifted_half": LossMemory(4, 2, 6),
}


def activation_terms(
    info: ModelInfo,
    *,
    mode: str,
    tokens: int,
    lora_rank: int = 0,
    autocast: bool = False,
    loss: str = "chunked",
    lora_dropout: bool = False,
) -> ActivationTerms:
    """The activation terms for `tokens` tokens in one micro-batch (exact integers).

    `loss` and `lora_dropout` (each adapter's dropout keeps its bool mask) describe other
    trainers' published runs; the bundled trainer's are the defaults."""
    lay = Layout.of(info)
    kw = {"mode": mode, "lora_rank": lora_rank, "autocast": autocast}
    shared = shared_kept(lay, lora_rank=lora_rank, autocast=autocast)
    layers = _layer_sum(lay, tokens, **kw) + tokens * (
        shared + (POSITION_IDS if mode != "none" else 0)
    )
    if mode == "none":  # layer 0's own difference (its first norm under LoRA)
        moe0 = lay.moe_layers == lay.layers
        first = layer_saved(lay, lora_rank=lora_rank, autocast=autocast, first=True, moe=moe0)
        layers += tokens * (first - kept_per_layer(lay, moe=moe0, **kw))  # type: ignore[arg-type]
    if lora_dropout and lora_rank:  # one bool per input feature of every adapter, kept
        masks = sum(i for i, _, a in lay.linears() if a)
        layers += tokens * masks * (lay.layers if mode == "none" else 0)
    root = tokens * root_kept(lay, lora_rank=lora_rank, autocast=autocast)
    lm = LOSSES[loss]
    chunk = loss_chunk_bytes(lay.vocab, tokens) if lm.chunked else 0
    extra = LOSS_KEPT_PER_TOKEN if lm.chunked else 0
    logits = tokens * (lm.backward * lay.vocab + extra) + chunk
    casts = autocast_weight_copies(info, lora_rank) if autocast else 0
    recompute = _recompute(lay, mode, tokens, lora_rank, autocast) if mode != "none" else 0
    if lora_dropout and lora_rank and mode != "none":  # the recomputed layer's masks
        recompute += tokens * sum(i for i, _, a in lay.linears() if a)
    # The matmuls keep their cast weights for backward: every one without checkpointing,
    # else only the head's (outside the checkpointed layers); a recomputed layer recasts.
    head_cast = 2 * lay.vocab * lay.h if casts and not lora_rank else 0
    kept_casts = casts if mode == "none" else head_cast
    at_forward = layers + root + tokens * (lm.forward * lay.vocab + extra) + chunk + casts
    at_loss = layers + root + logits + kept_casts
    at_layer = layers + recompute if mode != "none" else 0  # the head's cast is freed by then
    phases = {"forward": at_forward, "loss": at_loss, "layer": at_layer}
    phase = max(phases, key=phases.__getitem__)
    kept = layers + root + tokens * (lm.kept * lay.vocab + extra) + kept_casts
    return ActivationTerms(layers, root, logits, recompute, casts, kept, phases[phase], phase)
