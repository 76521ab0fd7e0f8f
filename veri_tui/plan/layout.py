"""The figures of a decoder's layers that the activation model counts from (activations.py):
its widths and heads, how many layers of each kind (dense, mixture of experts) it has, and
each kind's matmul linears in forward order. Read from ModelInfo (config.json and the
headers); no knob enters here.
"""

from __future__ import annotations

from typing import NamedTuple

from veri_tui.plan.model_info import ModelInfo


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

    @property
    def kinds(self) -> tuple[tuple[bool, int], ...]:
        """(a MoE layer, how many) of each kind of layer the model has, in the order the
        layers run: the dense ones come first (DeepSeek's first layers, the tiny MoE's
        layer 0), so layer 0 is a MoE layer only when every layer is."""
        dense = self.layers - self.moe_layers
        return tuple((moe, n) for moe, n in ((False, dense), (True, self.moe_layers)) if n)

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

    def mms(self, moe: bool, lora_rank: int) -> list[tuple[int, int]]:
        """(in, out) of each mm a layer runs, in forward order: a linear LoRA adapts runs
        three, the base, then A (r wide), then B."""
        out: list[tuple[int, int]] = []
        for i, o, adapted in self.linears(moe):
            out += [(i, o), (i, lora_rank), (lora_rank, o)] if lora_rank and adapted else [(i, o)]
        return out
