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
    recompute: int  # a checkpointed layer recomputed in backward, with its gradients
    casts: int  # autocast's bf16 weight copies (fp32 weights at stage 0)
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
        if moe and not lora_rank:  # the routed experts' fused weights
            total += count * info.experts * 3 * lay.h * info.moe_intermediate_size
    return 2 * (total + (0 if lora_rank else lay.vocab * lay.h))


def _layer_sum(lay: Layout, tokens: int, **kw: object) -> int:
    """Bytes every layer keeps, dense and MoE layers each at their own figure."""
    dense = lay.layers - lay.moe_layers
    return tokens * (
        dense * kept_per_layer(lay, moe=False, **kw)  # type: ignore[arg-type]
        + lay.moe_layers * kept_per_layer(lay, moe=True, **kw)  # type: ignore[arg-type]
    )


def _recompute(lay: Layout, mode: str, lora_rank: int, autocast: bool) -> int:
    """Per token: a checkpointed layer recomputed in its backward, beyond what it keeps
    (the larger of a dense and a MoE layer)."""
    out = 0
    kinds = [moe for moe, n in ((False, lay.layers - lay.moe_layers), (True, lay.moe_layers)) if n]
    for moe in kinds:
        saved = layer_saved(lay, lora_rank=lora_rank, autocast=autocast, moe=moe)
        cached = selective_saved(lay, lora_rank, moe) if mode == "selective" else 0
        inter = lay.info.moe_intermediate_size * lay.info.experts_per_token if moe else 0
        grads = stream_bytes(lora_rank, autocast) * lay.h + 4 * (
            inter or lay.info.intermediate_size
        )
        if lora_rank and autocast:  # the fp32 casts of an adapter's input and its gradient
            grads += 4 * lay.info.intermediate_size
        mms = len(lay.linears(moe)) + 2 * sum(a for *_, a in lay.linears(moe)) * bool(lora_rank)
        if mode == "selective" and mms % 2:
            grads += 2 * lay.h  # the last mm (down) is cached: its output outlives its use
        out = max(out, saved - cached + grads)
    return out


def activation_terms(
    info: ModelInfo, *, mode: str, tokens: int, lora_rank: int = 0, autocast: bool = False
) -> ActivationTerms:
    """The activation terms for `tokens` tokens in one micro-batch (exact integers)."""
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
    root = tokens * root_kept(lay, lora_rank=lora_rank, autocast=autocast)
    chunk = loss_chunk_bytes(lay.vocab, tokens)
    logits = tokens * (4 * lay.vocab + LOSS_KEPT_PER_TOKEN) + chunk
    casts = autocast_weight_copies(info, lora_rank) if autocast else 0
    recompute = tokens * _recompute(lay, mode, lora_rank, autocast) if mode != "none" else 0
    # The matmuls keep their cast weights for backward: every one without checkpointing,
    # else only the head's (outside the checkpointed layers); a recomputed layer recasts.
    head_cast = 2 * lay.vocab * lay.h if casts and not lora_rank else 0
    kept_casts = casts if mode == "none" else head_cast
    at_forward = layers + root + tokens * (2 * lay.vocab + LOSS_KEPT_PER_TOKEN) + chunk + casts
    at_loss = layers + root + logits + kept_casts
    layer_casts = (casts - head_cast) // lay.layers
    at_layer = layers + recompute + layer_casts + kept_casts if mode != "none" else 0
    phases = {"forward": at_forward, "loss": at_loss, "layer": at_layer}
    phase = max(phases, key=phases.__getitem__)
    return ActivationTerms(layers, root, logits, recompute, casts, phases[phase], phase)
