"""What a published memory figure is recorded as (benchmarks/published_memory.py gathers
them): a run the knobs plan (MemRun), a fact of how it held memory unlike the bundled
trainer (Fact), a figure the knobs cannot express (Unexpressed); and the Qwen (v1) models
as Llama-shaped configs and tensors.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from published_runs import llama


def qwen(h: int, mlp: int, layers: int, heads: int, vocab: int) -> dict[str, Any]:
    """A Qwen (v1) model as a Llama-shaped config: its config.json's intermediate_size is
    twice the MLP width (w1 and w2 each take half), wte and lm_head are untied."""
    return {**llama(h, mlp, layers, heads, heads, vocab), "max_position_embeddings": 8192}


def qwen_tensors(config: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Qwen's tensors under Llama names, q, k, v fused as one linear (its c_attn): the LoRA
    adapter then counts what peft adds to c_attn, c_proj, w1, w2 and the MLP's c_proj."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [v, h])}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        for name, shape in (
            ("input_layernorm.weight", [h]), ("self_attn.qkv_proj.weight", [3 * h, h]),
            ("self_attn.qkv_proj.bias", [3 * h]), ("self_attn.o_proj.weight", [h, h]),
            ("post_attention_layernorm.weight", [h]), ("mlp.gate_proj.weight", [i, h]),
            ("mlp.up_proj.weight", [i, h]), ("mlp.down_proj.weight", [h, i]),
        ):  # fmt: skip
            t[p + name] = ("BF16", shape)
    t["model.norm.weight"] = ("BF16", [h])
    t["lm_head.weight"] = ("BF16", [v, h])
    return t


class MemRun(NamedTuple):
    """One published peak and the configuration it ran."""

    id: str
    source: tuple[str, str, str]
    quote: str
    shape: str
    gpu: str
    gpu_count: int
    micro_batch_size: int
    seq: int
    checkpointing: str  # none | selective | full
    precision: str
    lora_rank: int
    load_in_4bit: bool
    zero_stage: int
    measured_bytes: float
    measured_as: str  # "device" (the process's, as nvidia-smi shows), "reserved", "allocated"
    facts: tuple[str, ...] = ()  # keys of MEMORY_FACTS: how the run differs from ours
    judged: bool = True
    reason: str = ""  # why not judged
    note: str = ""
    cpu_offload: bool = False


class Fact(NamedTuple):
    """How a published run held memory unlike the bundled trainer, as its source states."""

    source: tuple[str, str, str] | str  # (repository, file, commit) or a URL
    quote: str
    sentence: str
    loss: str | None = None  # veri_tui.plan.losses.LOSSES key
    lora_dropout: bool = False
    trainable_bytes: int | None = None  # per trainable parameter, as its optimizer holds them
    extra_bytes: float = 0.0  # buffers beside the states (DeepSpeed's gradient buckets)
    quant_bytes_per_param: float | None = None  # the 4-bit format of the adapted linears


class Unexpressed(NamedTuple):
    """A published peak the knobs cannot express, and why."""

    id: str
    source: tuple[str, str, str]
    quote: str
    measured: str
    reason: str
    kind: str = "Not expressible"  # or "Not judged": expressible, but not as it ran
