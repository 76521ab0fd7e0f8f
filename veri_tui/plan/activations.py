"""What one micro-batch keeps for backward, per GPU, as the bundled trainer runs it: the
activation terms of the peak (veri_tui/plan/peak.py assembles the peak from them).

Counted from what the code holds, per token, for a decoder layer in transformers (SDPA
attention, HF's RMSNorm, SwiGLU or a mixture of experts), each term measured against what a
real model keeps (tests/plan/test_saved_tensors.py; the derivation is in docs/planning.md):

- an RMSNorm keeps its input in fp32 (4h), its 1/rms (4) and, when its weight trains, the
  normalised input in the compute dtype (2h; 4h under autocast, which leaves it fp32);
- a linear keeps its input when its weight trains: one copy shared by q, k and v (and by
  gate and up); autocast casts it for each linear; a LoRA adapter keeps its rank-r middle;
- attention keeps rotated q, k, v, its output and the fp32 log-sum-exp (Qwen3's per-head
  q/k norms add their inputs; DeepSeek's latent attention its two normed latents);
- a dense MLP keeps gate, silu(gate) and up, and their product when down trains (8I or 6I);
  a mixture-of-experts block its routed copies, router probabilities and shared experts
  (mlp_bytes_per_token, measured by tests/trainer/test_moe_training.py).

Checkpointing ("none" | "selective" | "full", veri_tui/trainer/checkpointing.py) decides what a
layer keeps between its forward and its backward: everything; its input plus the outputs of the
attention kernel and of every other mm (torchtitan's op policy); or its input only. A
checkpointed layer is recomputed in backward, one at a time. The loss (veri_tui/trainer/losses.py)
keeps the bf16 logits (2V) and writes their bf16 gradient (2V) beside one fp32 chunk.
"""

from __future__ import annotations

from typing import NamedTuple

from veri_tui.jobfolder.knobs import CHECKPOINTING
from veri_tui.plan.model_info import ModelInfo

MODES = CHECKPOINTING  # the schema's activation_checkpointing values
# The fp32 bytes of one chunk of logits in the loss: veri_tui/trainer/losses.py CHUNK_BYTES (the
# trainer cannot import this package; tests/trainer/test_losses.py checks they agree).
LOSS_CHUNK_BYTES = 256 * 2**20
# Per token beside the logits the loss keeps the label index (int64), its mask (bool) and
# the fp32 log-sum-exp: 8 + 1 + 4.
LOSS_KEPT_PER_TOKEN = 13
POSITION_IDS = 8  # int64 per token, kept with a checkpointed layer's inputs
# The micro-batch on the GPU: input_ids, attention_mask and labels, int64 each.
BATCH_PER_TOKEN = 3 * 8
# A MoE layer, per routed copy of a token: int64 sort/unsort indices (4 x 8) + its bf16
# routing weight (2); per expert of the router: its fp32 probability (measured).
MOE_INDEX_BYTES = 34
ROUTER_BYTES_PER_EXPERT = 4


class Layout(NamedTuple):
    """The figures of the layers, from ModelInfo (config.json and the headers)."""

    info: ModelInfo
    h: int
    qd: int  # q (and k per kv head) width
    kd: int
    vd: int  # v width (latent attention's differs)
    od: int  # the attention output's width
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    moe_layers: int

    @classmethod
    def of(cls, info: ModelInfo) -> Layout:
        h, heads = info.hidden_size, info.num_attention_heads or 1
        hd = info.head_dim or h // heads
        kv = info.num_key_value_heads or heads
        qd, kd = heads * hd or h, kv * hd or h
        vd, od = kv * info.v_head_dim or kd, heads * info.v_head_dim or qd
        layers = max(info.layer_count, 1)
        return cls(
            info, h, qd, kd, vd, od, heads, kv, hd, layers, min(info.moe_layer_count, layers)
        )

    @property
    def vocab(self) -> int:
        return self.info.vocab_size

    @property
    def moe_model(self) -> bool:
        """A mixture of experts: LoRA adapts attention only (veri_tui/trainer/lora_targets.py)."""
        return self.moe_layers > 0

    def linears(self, moe: bool = False) -> list[tuple[int, int, bool]]:
        """(in, out, LoRA adapts it) of a layer's mm linears in forward order: q, k, v, o,
        then gate, up, down (dense) or the router and the shared experts' (MoE; routed
        experts run grouped, not as mm)."""
        h, i = self.h, self.info.intermediate_size
        out = [(h, self.qd, True), (h, self.kd, True), (h, self.vd, True), (self.od, h, True)]
        mlp = not self.moe_model
        if not moe:
            return out + [(h, i, mlp), (h, i, mlp), (i, h, mlp)]
        out.append((h, self.info.experts, False))
        shared = self.info.shared_expert_intermediate_size
        return out + (
            [(h, shared, False), (h, shared, False), (shared, h, False)] if shared else []
        )


def mlp_bytes_per_token(info: ModelInfo, moe: bool = False) -> int:
    """Bytes a layer's MLP saves per token beyond its input (its weights training): dense
    8I, or a MoE block's: per routed copy (k per token) its gathered input and output (4h),
    its SwiGLU's 8I (I = moe_intermediate_size) and 34 bytes of indices and routing weight;
    the router's fp32 probabilities (4E); each shared expert's 8I."""
    if not moe:
        return 8 * info.intermediate_size
    routed = 8 * info.moe_intermediate_size + 4 * info.hidden_size + MOE_INDEX_BYTES
    return (
        (info.experts_per_token or info.experts) * routed  # k unknown: every expert
        + ROUTER_BYTES_PER_EXPERT * info.experts
        + 8 * info.shared_expert_intermediate_size
    )


def _mlp(lay: Layout, *, moe: bool, trains: bool, cast: bool) -> int:
    """Per token, what a layer's MLP keeps with its input copies: trained, its input (one
    copy; autocast's per linear: gate and up, the router and shared experts), frozen no
    input and no product for down (6I, and k x (2h + 2I) less in a MoE block). Under
    autocast transformers' grouped experts run in fp32 (twice the routed bytes)."""
    info = lay.info
    if not moe:
        inter = info.intermediate_size
        return (2 * (2 if cast else 1) * lay.h + 8 * inter) if trains else 6 * inter
    k, shared, routed_i = info.experts_per_token, info.shared_expert_intermediate_size, 0
    routed_i = info.moe_intermediate_size
    base = mlp_bytes_per_token(info, moe=True)
    if not trains:
        return base - k * (2 * lay.h + 2 * routed_i) - 2 * shared
    if cast:  # the routed copies in fp32; the router's and shared experts' inputs cast
        base += k * (8 * routed_i + 4 * lay.h)
        return base + 2 * lay.h * (1 + (2 if shared else 0))
    return base + 2 * lay.h


def layer_saved(
    lay: Layout, *, lora_rank: int, autocast: bool, first: bool = False, moe: bool = False
) -> int:
    """Bytes per token one layer (a MoE one with `moe`) saves for backward without
    checkpointing (`first`: layer 0, whose input needs no gradient under LoRA)."""
    h, qd, kd = lay.h, lay.qd, lay.kd
    frozen = lora_rank > 0
    cast = autocast and not frozen  # fp32 weights under autocast (LoRA's base is bf16)
    norm = 4 * h + 4 + (0 if frozen else 4 * h if cast else 2 * h)
    norms = 2 * norm - (4 * h + 4 if frozen and first else 0)
    mlp_trains = not frozen or not lay.moe_model  # a MoE model's MLPs stay frozen in LoRA
    # The attention's linear input: one copy for q, k and v; autocast casts one per linear;
    # with fp32 adapters over a bf16 base (LoRA under autocast) peft casts each adapter's
    # input to fp32 and autocast back: a copy per adapter, o's too (down's replaces the
    # product, which only it kept).
    inputs = (3 if cast else 1) * 2 * h
    if frozen and autocast:
        inputs = 3 * 2 * h + 2 * qd + (2 * 2 * h if mlp_trains and not moe else 0)
    attention = 2 * qd + 2 * kd + 2 * lay.vd + 2 * lay.od + 4 * lay.heads
    attention += 8 * (lay.info.q_lora_rank + lay.info.kv_lora_rank)
    if lay.info.qk_norm:
        attention += 4 * qd + 4 * lay.heads + 4 * kd + 4 * lay.kv_heads
        attention += 0 if frozen else 2 * qd + 2 * kd
    adapters = 2 * lora_rank * sum(adapted for *_, adapted in lay.linears(moe)) if frozen else 0
    mlp = _mlp(lay, moe=moe, trains=mlp_trains, cast=cast)
    if frozen and autocast and mlp_trains and not moe:
        mlp -= 2 * h  # _mlp's one shared input: replaced by the per-adapter copies above
    return norms + inputs + attention + mlp + adapters


def mm_outputs(lay: Layout, lora_rank: int, moe: bool) -> list[int]:
    """The output width of each mm of a layer in forward order (a LoRA linear runs three:
    the base, then A (r wide), then B)."""
    outs: list[int] = []
    for _, out, adapted in lay.linears(moe):
        outs += [out, lora_rank, out] if lora_rank and adapted else [out]
    return outs


def selective_saved(lay: Layout, lora_rank: int, moe: bool = False) -> int:
    """Bytes per token the selective policy caches in one layer: the attention kernel's
    output and log-sum-exp, and the output of every odd-numbered mm."""
    return 2 * lay.od + 4 * lay.heads + sum(2 * o for o in mm_outputs(lay, lora_rank, moe)[0::2])


def selective_recompute_flops(lay: Layout, lora_rank: int) -> int:
    """Matmul FLOPs per token the selective policy recomputes in backward: every layer's
    even-numbered mms and a MoE layer's routed experts; attention is kept, the head is
    outside the checkpointed layers."""
    total = 0
    for moe, count in ((False, lay.layers - lay.moe_layers), (True, lay.moe_layers)):
        sizes: list[int] = []
        for i, o, adapted in lay.linears(moe):
            sizes += [i * o, i * lora_rank, lora_rank * o] if lora_rank and adapted else [i * o]
        per = sum(sizes[1::2])
        if moe:
            per += lay.info.experts_per_token * 3 * lay.h * lay.info.moe_intermediate_size
        total += 2 * count * per
    return total


def stream_bytes(lora_rank: int, autocast: bool) -> int:
    """Bytes per hidden unit of the residual stream between layers (fp32 under autocast)."""
    return 4 if autocast and not lora_rank else 2


def kept_per_layer(
    lay: Layout, mode: str, *, lora_rank: int, autocast: bool, moe: bool = False
) -> int:
    """Bytes per token one layer keeps from its forward until its backward."""
    if mode == "none":
        return layer_saved(lay, lora_rank=lora_rank, autocast=autocast, moe=moe)
    kept = stream_bytes(lora_rank, autocast) * lay.h  # the checkpoint keeps the layer input
    return kept + (selective_saved(lay, lora_rank, moe) if mode == "selective" else 0)


def root_kept(lay: Layout, *, lora_rank: int, autocast: bool) -> int:
    """Bytes per token the final norm and the head keep (the head's input when it trains)."""
    h, trains = lay.h, not lora_rank
    norm = 4 * h + 4 + ((4 if autocast else 2) * h if trains else 0)
    return norm + (2 * h if trains else 0)


def shared_kept(lay: Layout, *, lora_rank: int, autocast: bool) -> int:
    """Bytes per token alive through the whole step: the micro-batch (the embedding keeps
    the ids) and the rotary cos/sin tables every layer uses (fp32 under autocast)."""
    return BATCH_PER_TOKEN + 2 * lay.head_dim * (4 if autocast and not lora_rank else 2)


def loss_chunk_bytes(vocab_size: int, tokens: int) -> int:
    """The one fp32 chunk of logits the loss holds at a time (smaller for short batches)."""
    if vocab_size <= 0:
        return 0
    per_chunk = max(1, LOSS_CHUNK_BYTES // (4 * vocab_size))
    return 4 * vocab_size * min(tokens, per_chunk)


def sequence_length(method: str, max_seq_length: int, max_length: int) -> int:
    """Tokens per sample in one forward: DPO runs chosen and rejected together."""
    return 2 * max_length if method == "dpo" else max_seq_length
