"""Mixture-of-experts figures from the headers and config.json: experts, active parameters.

Counted from the header names and shapes, as every parameter is (model_info.py):

- a **routed expert** tensor sits under a module named `experts` inside a decoder layer:
  one tensor per expert (`mlp.experts.<e>.gate_proj.weight`: Qwen2/3-MoE, DeepSeek-V2/V3;
  `block_sparse_moe.experts.<e>.w1.weight`: Mixtral) or one fused tensor whose dim 0 is the
  expert (`mlp.experts.gate_up_proj`, gpt-oss's `gate_up_proj_blocks`, `..._bias`);
- the **router** is a layer's `gate` or `router` module (`mlp.gate.weight`,
  `block_sparse_moe.gate.weight`, gpt-oss's `mlp.router.weight` and `.bias`, DeepSeek-V3's
  `mlp.gate.e_score_correction_bias`);
- **shared experts** are modules named `shared_expert...` (`shared_expert`, Qwen2-MoE's
  `shared_expert_gate`, DeepSeek's `shared_experts`): always active, like the router;
- a **MoE layer** is a decoder layer holding routed experts; the others are dense (DeepSeek's
  `first_k_dense_replace`, Qwen-MoE's `mlp_only_layers` / `decoder_sparse_step`).

Active parameters per token = every parameter but the routed experts, plus k/E of each MoE
layer's routed experts (k routed experts per token, E in the layer). That is how Qwen
(Qwen3-30B-A3B: 3.3B) and Mistral (Mixtral-8x7B: 12.9B) count; OpenAI's gpt-oss card leaves
the input embedding out (a lookup). From config.json: E (`num_experts`, `num_local_experts`,
`n_routed_experts`; the header's count wins), k (`num_experts_per_tok`, `experts_per_token`,
`moe_topk`), shared experts (`n_shared_experts`; Qwen2-MoE's one
`shared_expert_intermediate_size` wide), `moe_intermediate_size`.

gpt-oss ships its routed experts as MXFP4: `*_blocks` U8 tensors pack two 4-bit weights per
byte (counted as 2 parameters per element), `*_scales` hold one 8-bit exponent per 32
weights (quantisation metadata, not parameters; the trainer would train the dequantised bf16).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any

ROUTED = "experts"
ROUTERS = ("gate", "router")
EXPERTS_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
MXFP4_BLOCKS, MXFP4_SCALES = "_blocks", "_scales"


def cfg_int(config: dict[str, Any], *keys: str, default: int = 0) -> int:
    """The first of `keys` that holds an int (bools are not ints here)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def logical_numel(name: str, dtype: str, numel: int, names: Container[str]) -> int:
    """Parameters a tensor holds: MXFP4 blocks 2 per byte, their scales none."""
    if dtype == "U8" and name.endswith(MXFP4_BLOCKS):
        return 2 * numel
    if dtype == "U8" and name.endswith(MXFP4_SCALES):
        if name[: -len(MXFP4_SCALES)] + MXFP4_BLOCKS in names:
            return 0
    return numel


class LayerExperts:
    """What one decoder layer holds of experts (filled tensor by tensor)."""

    __slots__ = ("routed", "indices", "fused_experts", "router", "shared")

    def __init__(self) -> None:
        self.routed = 0
        self.indices: set[str] = set()
        self.fused_experts = 0
        self.router = 0
        self.shared = 0

    def add(self, segments: list[str], shape: tuple[int, ...], n: int) -> None:
        """Classify one tensor of this layer by its name's segments."""
        if ROUTED in segments[:-1]:
            self.routed += n
            after = segments[segments.index(ROUTED) + 1]
            if after.isdigit():
                self.indices.add(after)
            elif shape:
                self.fused_experts = max(self.fused_experts, shape[0])
        elif any(s.startswith("shared_expert") for s in segments):
            self.shared += n
        elif len(segments) >= 2 and segments[-2] in ROUTERS:
            self.router += n

    def experts(self, configured: int) -> int:
        """E of this layer: counted from the header, else config.json's."""
        return len(self.indices) or self.fused_experts or configured


def moe_figures(
    layers: dict[int, LayerExperts], text: dict[str, Any], total: int
) -> dict[str, Any]:
    """The ModelInfo fields of experts and active parameters (zeros for a dense model)."""
    configured = cfg_int(text, *EXPERTS_KEYS)
    moe = {i: lay for i, lay in layers.items() if lay.routed}
    per_layer = {lay.experts(configured) for lay in moe.values()}
    experts = max(per_layer, default=0)
    k = cfg_int(text, *PER_TOKEN_KEYS) if moe else 0
    if not 0 < k <= experts:
        k = 0  # unknown: 0 here, and every expert counted active (FLOPs an upper bound)
    routed = sum(lay.routed for lay in moe.values())
    inactive = 0
    if k:
        inactive = sum(
            lay.routed - lay.routed * k // lay.experts(configured) for lay in moe.values()
        )
    shared_n = cfg_int(text, "n_shared_experts", "num_shared_experts")
    moe_inter = cfg_int(text, "moe_intermediate_size") if moe else 0
    shared_inter = cfg_int(text, "shared_expert_intermediate_size") or shared_n * moe_inter
    shared_params = sum(lay.shared for lay in layers.values())
    if shared_params and not shared_n:
        shared_n = 1  # Qwen2-MoE: one shared expert, shared_expert_intermediate_size wide
    return {
        "active_parameter_count": total - inactive,
        "experts": experts,
        "experts_per_token": k,
        "shared_experts": shared_n if shared_params else 0,
        "moe_layer_count": len(moe),
        "moe_intermediate_size": moe_inter,
        "shared_expert_intermediate_size": shared_inter if shared_params else 0,
        "routed_expert_parameters": routed,
        "router_parameters": sum(lay.router for lay in moe.values()),
        "shared_expert_parameters": shared_params,
    }


def attention_figures(text: dict[str, Any], heads: int, hidden: int) -> dict[str, int]:
    """Per-head widths: q/k (`qk_head_dim`) and v, and the MLA latent ranks (0 without)."""
    nope = cfg_int(text, "qk_nope_head_dim")
    rope = cfg_int(text, "qk_rope_head_dim")
    kv_lora = cfg_int(text, "kv_lora_rank")
    if kv_lora and nope + rope:  # DeepSeek-V2/V3 multi-head latent attention
        qk = nope + rope
        v = cfg_int(text, "v_head_dim", default=qk)
        return {"head_dim": qk, "v_head_dim": v, "q_lora_rank": cfg_int(text, "q_lora_rank"),
                "kv_lora_rank": kv_lora}  # fmt: skip
    head_dim = cfg_int(text, "head_dim") or (hidden // heads if heads else 0)
    return {"head_dim": head_dim, "v_head_dim": head_dim, "q_lora_rank": 0, "kv_lora_rank": 0}


def moe_line(info: Any, lora: bool, human_count: Callable[[int], str]) -> str | None:
    """The plan header's `experts:` line for a MoE model (None for a dense one)."""
    if not info.moe_layer_count:
        return None
    dense = info.layer_count - info.moe_layer_count
    shared = f"{info.shared_experts} shared" if info.shared_experts else "no shared"
    n, active = info.parameter_count, info.active_parameter_count
    k = info.experts_per_token or "? (config.json names none: all counted active)"
    line = (
        f"experts: {info.experts} routed, {k} per token, {shared}, in "
        f"{info.moe_layer_count} of {info.layer_count} layers ({dense} dense); "
        f"{active:,} active parameters per token ({human_count(active)} of {human_count(n)})"
    )
    if lora:
        line += "; LoRA adapts attention only (experts, router and MLPs frozen)"
    return line
