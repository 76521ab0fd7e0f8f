"""One kind of decoder layer (dense, or a mixture of experts) under the knobs that change
what it holds (the checkpointing mode, LoRA's rank, autocast), per token: what it saves for
backward, what it keeps until its backward under the mode, what it holds again when it is
recomputed, the weights autocast casts for it, the FLOPs the selective policy recomputes.
The activation model (activations.py) holds one per kind the model has and sums them; the
terms are explained there and measured by tests/plan/test_saved_tensors.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veri_tui.plan.activations import ActivationModel

# A MoE layer, per routed copy of a token: int64 sort/unsort indices (4 x 8) + its bf16
# routing weight (2); per expert of the router: its fp32 probability (measured).
MOE_INDEX_BYTES = 34
ROUTER_BYTES_PER_EXPERT = 4
# The memory-efficient attention's additive bias, per query and key: SDPA makes a boolean
# mask the query's dtype (bf16: FSDP2 and autocast compute in bf16).
MASK_BYTES = 2


class LayerKind:
    """`count` layers of one kind (`moe`) under the model's knobs; every figure in bytes per
    token but `casts` (bytes) and `recompute_flops` (FLOPs per token), computed once."""

    def __init__(self, model: ActivationModel, moe: bool, count: int) -> None:
        layout, checkpointing = model.layout, model.checkpointing
        self.layout, self.moe, self.count = layout, moe, count
        self.lora_rank, self.autocast = model.lora_rank, model.autocast
        self.mask_length = model.mask_length
        self.frozen, self.cast = model.frozen, model.cast
        self.mlp_trains = not self.frozen or not layout.moe_model  # LoRA on MoE: attention
        self.mms = layout.mms(moe, model.lora_rank)
        selective = checkpointing == "selective"
        #: Saved for backward without checkpointing (layer 0: `first_saved`).
        self.saved = self._saved(first=False)
        self.first_saved = self._saved(first=True)
        #: Cached by the selective policy: the attention kernel's output and log-sum-exp, and
        #: the output of every odd-numbered mm.
        self.cached = self._selective_cached() if selective else 0
        #: Kept from its forward until its backward: everything, or the checkpoint's input
        #: (and the selective policy's cache).
        stream = model.stream
        self.kept = self.saved if checkpointing == "none" else stream * layout.h + self.cached
        #: Alive beyond what it keeps while it is recomputed in backward: its saved set, its
        #: input's and its MLP's gradients.
        self.recomputed = self.saved - self.cached + self._gradients(stream, selective)
        #: Autocast's bf16 copies of its mm weights (the adapters' under LoRA; grouped
        #: experts run in fp32, uncast), made again when it is recomputed.
        self.casts = self._casts() if self.autocast else 0
        self.recompute_flops = self._recompute_flops()

    def mlp_saved(self) -> int:
        """Bytes its MLP saves per token beyond its input (its weights training): dense 8I,
        or a MoE block's: per routed copy (k per token) its gathered input and output (4h),
        its SwiGLU's 8I (I = moe_intermediate_size) and 34 bytes of indices and routing
        weight; the router's fp32 probabilities (4E); each shared expert's 8I."""
        info = self.layout.info
        if not self.moe:
            return 8 * info.intermediate_size
        routed = 8 * info.moe_intermediate_size + 4 * info.hidden_size + MOE_INDEX_BYTES
        return (
            (info.experts_per_token or info.experts) * routed  # k unknown: every expert
            + ROUTER_BYTES_PER_EXPERT * info.experts
            + 8 * info.shared_expert_intermediate_size
        )

    def _mlp(self) -> int:
        """What its MLP keeps with its input copies: trained, its input (one copy;
        autocast's per linear: gate and up, the router and shared experts), frozen no
        input and no product for down (6I, and k x (2h + 2I) less in a MoE block). Under
        autocast transformers' grouped experts run in fp32 (twice the routed bytes)."""
        info, h, cast = self.layout.info, self.layout.h, self.cast
        if not self.moe:
            inter = info.intermediate_size
            return (2 * (2 if cast else 1) * h + 8 * inter) if self.mlp_trains else 6 * inter
        k, shared = info.experts_per_token, info.shared_expert_intermediate_size
        routed_i = info.moe_intermediate_size
        base = self.mlp_saved()
        if not self.mlp_trains:
            return base - k * (2 * h + 2 * routed_i) - 2 * shared
        if cast:  # the routed copies in fp32; the router's and shared experts' inputs cast
            base += k * (8 * routed_i + 4 * h)
            return base + 2 * h * (1 + (2 if shared else 0))
        return base + 2 * h

    def _saved(self, first: bool) -> int:
        """What it saves without checkpointing (`first`: layer 0, whose input needs no
        gradient under LoRA)."""
        lay, frozen, cast, autocast = self.layout, self.frozen, self.cast, self.autocast
        h, qd, kd = lay.h, lay.qd, lay.kd
        norm = 4 * h + 4 + (0 if frozen else 4 * h if cast else 2 * h)
        norms = 2 * norm - (4 * h + 4 if frozen and first else 0)
        dense_trains = self.mlp_trains and not self.moe
        # The attention's linear input: one copy for q, k and v; autocast casts one per
        # linear; with fp32 adapters over a bf16 base (LoRA under autocast) peft casts each
        # adapter's input to fp32 and autocast back: a copy per adapter, o's too (down's
        # replaces the product, which only it kept).
        inputs = (3 if cast else 1) * 2 * h
        if frozen and autocast:
            inputs = 3 * 2 * h + 2 * qd + (2 * 2 * h if dense_trains else 0)
        attention = 2 * qd + 2 * kd + 2 * lay.vd + 2 * lay.od + 4 * lay.heads
        if self.mask_length:  # k and v repeated to every head, the bf16 bias (activations.py)
            attention += 2 * (qd - kd) + 2 * (lay.od - lay.vd) + MASK_BYTES * self.mask_length
        attention += 8 * (lay.info.q_lora_rank + lay.info.kv_lora_rank)
        if lay.info.qk_norm:
            attention += 4 * qd + 4 * lay.heads + 4 * kd + 4 * lay.kv_heads
            attention += 0 if frozen else 2 * qd + 2 * kd
        adapted = sum(a for *_, a in lay.linears(self.moe))
        adapters = 2 * self.lora_rank * adapted if frozen else 0
        mlp = self._mlp()
        if frozen and autocast and dense_trains:
            mlp -= 2 * h  # _mlp's one shared input: replaced by the per-adapter copies above
        return norms + inputs + attention + mlp + adapters

    def _selective_cached(self) -> int:
        outs = [o for _, o in self.mms]
        return 2 * self.layout.od + 4 * self.layout.heads + sum(2 * o for o in outs[0::2])

    def _gradients(self, stream: int, selective: bool) -> int:
        """Its input's gradient and its MLP's (2h + 4I; a MoE block's four per routed copy,
        8h: its output's, its input's, their scatter and its zeros, its gate/up output (2I)
        freed by then; the grouped experts run in fp32 under autocast)."""
        lay, info = self.layout, self.layout.info
        grads = stream * lay.h
        if self.moe:
            grads += info.experts_per_token * stream * (4 * lay.h - 2 * info.moe_intermediate_size)
        else:
            grads += 4 * info.intermediate_size
        if self.frozen and self.autocast:  # the fp32 casts of an adapter's input, its gradient
            grads += 4 * info.intermediate_size
        if selective and len(self.mms) % 2:
            grads += 2 * self.mms[-1][1]  # the last mm is cached: its output outlives its use
        return grads

    def _casts(self) -> int:
        r = self.lora_rank
        return 2 * sum(
            (r * (i + o) if r else i * o) * (a or not r)
            for i, o, a in self.layout.linears(self.moe)
        )

    def _recompute_flops(self) -> int:
        """The even-numbered mms and a MoE layer's routed experts (attention is kept)."""
        per = sum(i * o for i, o in self.mms[1::2])
        if self.moe:
            info = self.layout.info
            per += info.experts_per_token * 3 * self.layout.h * info.moe_intermediate_size
        return 2 * per
