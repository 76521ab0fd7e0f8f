"""What the planner knows about a model: parameter counts from safetensors headers + config.

Counts come from header shapes only (dtypes mix, so byte sizes would lie). From config.json
we take the architecture figures the activation and throughput estimates need. The LoRA
targets are the ones the bundled trainer adapts (the one rule of
veri_tui/jobfolder/knobs/lora_targets.py), so adapter sizes here match what it allocates.
Mixture-of-experts figures (routed and shared experts, dense layers, active parameters):
veri_tui/plan/moe.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

# The LoRA rule, shared with the trainer (a stdlib module uploaded with it to GPU hosts).
from veri_tui.jobfolder.knobs.lora_targets import ATTENTION_TARGETS, chosen, targets
from veri_tui.plan.headers import TensorInfo
from veri_tui.plan.moe import (
    ROUTED,
    ROUTERS,
    LayerExperts,
    attention_figures,
    cfg_int,
    logical_numel,
    moe_figures,
)

_TARGETS, _ATTENTION = targets(moe=False), frozenset(ATTENTION_TARGETS)
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
# Suffix tests, not regexes: they run on every tensor name of every `veri-tui plan`.
_EMBED_ENDS = (
    "embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight",
)  # fmt: skip
_HEADS = ("lm_head.weight", "output.weight", "embed_out.weight")
_HEAD_ENDS = tuple("." + h for h in _HEADS)


def _is_head(name: str) -> bool:
    """An output head: a whole name segment (`model.output.weight`, not `mlp_output...`)."""
    return name in _HEADS or name.endswith(_HEAD_ENDS)


def quantized_weight(name: str, parts: list[str], shape: tuple[int, ...]) -> bool:
    """Whether load_in_4bit stores this decoder-layer tensor in NF4: the weight of a linear
    (2-D), as transformers hands every `nn.Linear` but the head to bitsandbytes
    (`replace_with_bnb_linear`, skipping `get_keys_to_not_convert`'s head and tied keys),
    whether LoRA adapts it or not. A mixture of experts' routed experts and router are
    3-D / bare parameters in transformers 5 (`Qwen3MoeExperts.gate_up_proj`,
    `...TopKRouter.weight`), no nn.Linear, so they stay bf16, as the checkpoint's per-expert
    2-D names would not tell (contracts section 3; tests/plan/test_qlora_quantized.py reads
    transformers' own selection)."""
    if len(shape) != 2 or parts[-1] != "weight":
        return False
    return f".{ROUTED}." not in f".{name}" and parts[-2] not in ROUTERS


class ModelInfo(NamedTuple):
    """Parameter counts and architecture of one checkpoint, made by `build_model_info`
    (immutable; a NamedTuple, cheaper to define than a dataclass at every start-up).

    parameter_count is N: every tensor in the checkpoint, a tied head counted once.
    largest_layer_parameters is the largest FSDP unit: one decoder layer, or the root
    (embeddings, untied head, final norm) when that is larger. lora_in_out_sum is the sum of
    in + out features over the linears LoRA adapts. dtypes: parameters per header dtype
    (`MXFP4` for gpt-oss's packed expert blocks).

    Mixture of experts (moe.py; zeros and active = N for a dense model):
    active_parameter_count is what one token uses (N less the routed experts it is not sent
    to); experts is E per MoE layer, experts_per_token k (0 when config.json names none:
    then every expert counts as active), shared_experts the always-active
    ones; moe_layer_count of layer_count layers hold routed experts. head_dim is the q/k
    width per head and v_head_dim the v width (they differ in DeepSeek's latent attention,
    whose latent ranks are q_lora_rank and kv_lora_rank; 0 elsewhere).
    """

    source: str
    parameter_count: int
    path: str | None
    files: list[str]
    embedding_parameters: int
    lm_head_parameters: int
    tied_embeddings: bool
    tied_note: str | None
    layer_count: int
    largest_layer_parameters: int
    lora_in_out_sum: int
    lora_target_count: int
    lora_target_modules: list[str]
    model_type: str | None
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int | None
    dtypes: dict[str, int]
    active_parameter_count: int
    experts: int
    experts_per_token: int
    shared_experts: int
    moe_layer_count: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    routed_expert_parameters: int
    router_parameters: int
    shared_expert_parameters: int
    v_head_dim: int
    q_lora_rank: int
    kv_lora_rank: int
    # Per-head RMSNorms on q and k inside attention (Qwen3's q_norm / k_norm): they keep
    # their own inputs for backward (veri_tui/plan/activations.py).
    qk_norm: bool = False
    # Weights of the linears LoRA adapts, parameters.
    lora_target_parameters: int = 0
    # Weights QLoRA stores in 4 bits: every linear transformers builds as nn.Linear in the
    # decoder layers, adapted or not (quantized_weight below), parameters.
    quantized_parameters: int = 0
    # Per adaptable module name: (name, in + out sum, linears, weight parameters), what
    # `with_lora_targets` narrows the three figures above to (lora_target_modules).
    lora_modules: tuple[tuple[str, int, int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the record's `model`): plain types, lists and dicts copied."""
        d = self._asdict()
        for key in ("files", "lora_target_modules"):
            d[key] = list(d[key])
        d["lora_modules"] = [list(m) for m in self.lora_modules]
        d["dtypes"] = dict(self.dtypes)
        return d

    def adapter_parameters(self, rank: int) -> int:
        """LoRA parameters at this rank: rank x (in + out) per targeted linear."""
        return rank * self.lora_in_out_sum

    def with_lora_targets(self, wanted: list[str] | None) -> ModelInfo:
        """This model as the knob `lora_target_modules` adapts it: the LoRA figures over
        those modules only (unset: as read). ValueError names an unknown module and the
        ones the model has (veri_tui/jobfolder/knobs/lora_targets.py's `chosen`, the trainer's
        rule)."""
        if wanted is None:
            return self
        names = chosen([m[0] for m in self.lora_modules], bool(self.moe_layer_count), wanted)
        kept = [m for m in self.lora_modules if m[0] in names]
        return self._replace(
            lora_in_out_sum=sum(m[1] for m in kept),
            lora_target_count=sum(m[2] for m in kept),
            lora_target_parameters=sum(m[3] for m in kept),
            lora_target_modules=sorted(names),
            lora_modules=tuple(kept),
        )

    def summary(self) -> str:
        """One line: name and N in billions."""
        n = self.parameter_count
        return f"{self.source}: {n:,} parameters ({n / 1e9:.2f}B)"


def build_model_info(
    source: str,
    tensors: Iterable[TensorInfo],
    config: dict[str, Any],
    *,
    path: str | None,
    files: list[str],
) -> ModelInfo:
    """Count everything from the tensors; read architecture figures from config.json."""
    # Multimodal configs nest the language model's figures under text_config.
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    tie = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", True)))
    by_name = {t.name: t for t in tensors}
    # One regex search per tensor: the decoder layer it belongs to, or None for the root.
    layer_of = {}
    for name in by_name:
        m = _LAYER.search(name)
        layer_of[name] = int(m.group(1)) if m is not None else None
    embed = [t for name, t in by_name.items() if name.endswith(_EMBED_ENDS)]
    heads = [t for name, t in by_name.items() if layer_of[name] is None and _is_head(name)]
    note = None
    skip: set[str] = set()
    if tie and embed and heads:
        # transformers ties the head to the embedding at load: one tensor, counted once.
        skip = {h.name for h in heads}
        note = "tie_word_embeddings: lm_head and the embedding are one tensor, counted once"
    elif tie and embed and not heads:
        note = "tied embeddings: the output head reuses the embedding"
    total = 0
    dtypes: dict[str, int] = {}
    layers: dict[int, int] = {}
    experts: dict[int, LayerExperts] = {}
    root = 0
    # LoRA targets, attention and MLP apart: a mixture of experts adapts attention only.
    in_out = {True: 0, False: 0}
    target_count = {True: 0, False: 0}
    modules: dict[bool, set[str]] = {True: set(), False: set()}
    per_module: dict[str, list[int]] = {}
    target_params = {True: 0, False: 0}
    qk_norm = False
    quantized = 0
    for name, t in by_name.items():
        if name in skip:
            continue
        n = t.numel
        dtype = t.dtype
        if dtype == "U8":  # gpt-oss's MXFP4 blocks: 2 weights a byte; their scales: none
            n = logical_numel(name, dtype, n, by_name)
            dtype = "MXFP4" if n else dtype
        total += n
        if n:
            dtypes[dtype] = dtypes.get(dtype, 0) + n
        layer = layer_of[name]
        if layer is None:
            root += n
            continue
        layers[layer] = layers.get(layer, 0) + n
        # Substring tests first: most tensors are no expert, router or shared expert.
        if "expert" in name or "gate." in name or "router." in name:
            lay = experts.get(layer)
            if lay is None:
                lay = experts[layer] = LayerExperts()
            lay.add(name.split("."), t.shape, n)
        # jobfolder.knobs.lora_targets.adapts on the module name, unrolled (it runs per tensor).
        parts = name.rsplit(".", 2)
        qk_norm = qk_norm or parts[-2] == "q_norm"
        if quantized_weight(name, parts, t.shape):
            quantized += n
        if len(t.shape) == 2 and parts[-1] == "weight" and parts[-2] in _TARGETS:
            is_attention = parts[-2] in _ATTENTION
            out_f, in_f = t.shape
            in_out[is_attention] += in_f + out_f
            target_params[is_attention] += n
            target_count[is_attention] += 1
            modules[is_attention].add(parts[-2])
            fig = per_module.setdefault(parts[-2], [0, 0, 0])
            fig[0] += in_f + out_f
            fig[1] += 1
            fig[2] += n
    heads_n = cfg_int(text, "num_attention_heads", "n_head")
    hidden = cfg_int(text, "hidden_size", "n_embd", "d_model")
    attention = attention_figures(text, heads_n, hidden)
    moe = moe_figures(experts, text, total)
    kinds = (True,) if moe["moe_layer_count"] else (True, False)  # attention only in a MoE
    return ModelInfo(
        source=source,
        path=path,
        files=files,
        parameter_count=total,
        embedding_parameters=sum(t.numel for t in embed),
        lm_head_parameters=sum(t.numel for t in heads if t.name not in skip),
        tied_embeddings=tie and bool(embed) and (bool(skip) or not heads),
        tied_note=note,
        layer_count=len(layers),
        largest_layer_parameters=max([root, *layers.values()]),
        lora_in_out_sum=sum(in_out[k] for k in kinds),
        lora_target_count=sum(target_count[k] for k in kinds),
        lora_target_modules=sorted(set().union(*(modules[k] for k in kinds))),
        model_type=text.get("model_type") or config.get("model_type"),
        hidden_size=hidden,
        intermediate_size=cfg_int(text, "intermediate_size", "n_inner", "ffn_dim"),
        num_attention_heads=heads_n,
        num_key_value_heads=cfg_int(text, "num_key_value_heads", default=heads_n),
        vocab_size=cfg_int(text, "vocab_size"),
        max_position_embeddings=cfg_int(text, "max_position_embeddings", "n_positions") or None,
        dtypes=dtypes,
        **attention,
        **moe,
        qk_norm=qk_norm,
        lora_target_parameters=sum(target_params[k] for k in kinds),
        quantized_parameters=quantized,
        lora_modules=tuple(
            (name, f[0], f[1], f[2])
            for name, f in sorted(per_module.items())
            if (name in _ATTENTION) in kinds
        ),
    )
