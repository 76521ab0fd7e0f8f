"""Which linears LoRA adapts: one rule for the trainer (peft) and the planner (header counts).

Stdlib only: the planning core imports it to count adapter parameters from header names
exactly as the trainer picks its targets (veri_tui/plan/model_info.py), and the trainer
builds peft's `target_modules` from it (veri_tui/trainer/model.py).

The rule: a linear whose own name is one of the targets below. A dense model's targets are
the attention projections (DeepSeek's latent attention's included) and the MLP projections,
fused or not. A mixture-of-experts model (any module named `experts`: routed experts) adapts
its attention projections only; its routed experts, router, shared experts and the MLPs of
its dense layers stay frozen. Why attention only: transformers 5 stores routed experts as
fused 3-D parameters (`mlp.experts.gate_up_proj`), no nn.Linear; on such a model peft (0.18
and later) rewrites MLP names in target_modules (`gate_proj`, `up_proj`, `down_proj`, even
as full names or a regex) into `target_parameters` on the fused experts, which it merges
into a delta weight for all E experts at every forward (E x 2I x h more memory per layer),
and stops targeting the dense layers' MLP modules of those names. transformers 4 keeps one
nn.Linear per expert, which the same names would hit one by one. Attention names mean the
same adapter under both, and the plan's count stays exact.
"""

from __future__ import annotations

from collections.abc import Iterable

ATTENTION_TARGETS = (
    "q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj",
    "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
)  # fmt: skip
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj", "gate_up_proj")
LORA_TARGETS = ATTENTION_TARGETS + MLP_TARGETS
# The module that holds a MoE layer's routed experts (Qwen-MoE, Mixtral, DeepSeek, gpt-oss).
ROUTED_EXPERTS = "experts"
_ALL, _ATTENTION = frozenset(LORA_TARGETS), frozenset(ATTENTION_TARGETS)


def is_moe(names: Iterable[str]) -> bool:
    """Whether parameter or module names show routed experts (a segment `experts`)."""
    return any(ROUTED_EXPERTS in name.split(".") for name in names)


def targets(moe: bool) -> frozenset[str]:
    """The module names LoRA adapts: attention only in a mixture of experts."""
    return _ATTENTION if moe else _ALL


def adapts(module: str, moe: bool) -> bool:
    """Whether LoRA adapts the linear module of this dotted name."""
    return module.rsplit(".", 1)[-1] in targets(moe)


def target_modules(linears: Iterable[str], moe: bool) -> list[str]:
    """peft's `target_modules`: the adapted names present among these linears, in order."""
    present = {m.rsplit(".", 1)[-1] for m in linears if adapts(m, moe)}
    return [t for t in LORA_TARGETS if t in present]


def chosen(present: Iterable[str], moe: bool, wanted: Iterable[str] | None) -> list[str]:
    """The knob `lora_target_modules` over the module names a model has (`present`, the
    adaptable ones: `targets(moe)` among its linears): the default rule where unset, else
    the names asked for; ValueError naming the unknown ones and the names the model has.
    Only names the default rule knows are taken, so the plan's header count stays exact."""
    have = [t for t in LORA_TARGETS if t in set(present) and t in targets(moe)]
    if wanted is None:
        return have
    asked = list(dict.fromkeys(wanted))
    unknown = [w for w in asked if w not in have]
    if unknown or not asked:
        what = ", ".join(map(repr, unknown)) or "an empty list"
        raise ValueError(
            f"{what} is not a module LoRA can adapt in this model; it has {', '.join(have)}"
            + (" (attention only: a mixture of experts)" if moe else "")
        )
    return [t for t in have if t in asked]
