"""Every feature of the bundled trainer runs its own code on fake CUDA at real shapes, every
tensor where the plan puts it (issue 37 item 2; docs/trace.md).

Each row is the trainer's set-up, two optimizer steps, its eval and its checkpoint's save and
resume where it has them (veri_tui/trainer/fakecuda/trace.py), on 8 fake ranks at Qwen3-0.6B's
widths (hidden 1024, 16/8 heads, vocabulary 151,936, tied embeddings) and 2048 tokens, with 3
of its 28 layers (ops, not widths, cost time; every layer runs the same code), and at
Llama-3.1-8B's (untied head, 32/8 heads) and Qwen3-30B-A3B's (128 routed experts, 8 active)
where the shape changes the code path. A device-placement defect fails its row: an op
meeting tensors of two devices raises (FakeTensorDeviceMismatchError, the op named in its
note), and parameters, gradients, optimizer states, buffers and a DPO reference found off
the device the plan puts them on are listed by `Trace.problems()`. One module, one process:
torch and transformers are imported once for every row.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
from support.fakecuda import checkpoint, traced
from support.synthetic import LLAMA_3_1_8B, QWEN3_0_6B, QWEN3_30B_A3B

LAYERS = 3
RANKS = 8
MODELS = {"0.6b": QWEN3_0_6B, "8b": LLAMA_3_1_8B, "moe": QWEN3_30B_A3B}
#: feature -> (model, method, knobs); the rest is stage 3, bf16, mbs 1, no checkpointing.
FEATURES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "ddp": ("0.6b", "sft_text", {"zero_stage": 0}),
    "fsdp2_stage2": ("0.6b", "sft_text", {"zero_stage": 2}),
    "fsdp2_stage3": ("0.6b", "sft_text", {}),
    "cpu_offload": ("0.6b", "sft_text", {"cpu_offload": True}),
    "lora": ("0.6b", "sft_text", {"lora_rank": 16}),
    "lora_ddp": ("0.6b", "sft_text", {"lora_rank": 16, "zero_stage": 0}),
    "dpo_full": ("0.6b", "dpo", {}),
    "dpo_lora": ("0.6b", "dpo", {"lora_rank": 16}),
    "checkpointing_full": ("0.6b", "sft_text", {"activation_checkpointing": "full"}),
    "checkpointing_selective": ("0.6b", "sft_text", {"activation_checkpointing": "selective"}),
    "fp32": ("0.6b", "sft_text", {"precision": "fp32"}),
    "fp32_ddp": ("0.6b", "sft_text", {"precision": "fp32", "zero_stage": 0}),
    "eval": ("0.6b", "sft_text", {"eval_fraction": 0.1}),
    "packing": ("0.6b", "sft_text", {"packing": True}),
    "grad_accumulation": ("0.6b", "sft_text", {"gradient_accumulation_steps": 4}),
    "8b_stage3": ("8b", "sft_text", {}),
    "8b_cpu_offload": ("8b", "sft_text", {"cpu_offload": True}),
    "moe": ("moe", "sft_text", {}),
    "moe_lora": ("moe", "sft_text", {"lora_rank": 16}),
}
SAVED = {"fsdp2_stage3", "ddp", "lora", "cpu_offload", "8b_stage3", "moe_lora", "dpo_full"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shapes")
    return {name: checkpoint(root / name, config, LAYERS) for name, config in MODELS.items()}


# transformers 4 builds a mixture of experts as one module per expert, routed by a
# data-dependent nonzero() that fake tensors cannot trace, and the trainer refuses its full
# fine-tune across ranks (trainer/config.py): the MoE rows need transformers 5's fused
# experts (the lowest-versions run, .ci/lowest.sh, has 4.x).
_FUSED_EXPERTS = int(importlib.metadata.version("transformers").split(".")[0]) >= 5
ROWS = [
    pytest.param(name, marks=pytest.mark.skipif(
        not _FUSED_EXPERTS, reason="a mixture of experts needs transformers 5 (fused experts)"))
    if FEATURES[name][0] == "moe" else name
    for name in FEATURES
]  # fmt: skip


@pytest.mark.parametrize("feature", ROWS)
def test_every_tensor_is_where_the_plan_puts_it(
    feature: str, models: dict[str, Path], tmp_path: Path
) -> None:
    model, method, knobs = FEATURES[feature]
    run = traced(models[model], RANKS, tmp_path, method, save=feature in SAVED, **knobs)
    summary = run.summary()
    assert run.problems() == [], run.seen
    phases = set(summary["phases"])
    assert {"load", "forward", "backward", "optimizer step"} <= phases
    assert ("eval" in phases) == (feature == "eval")
    assert ("checkpoint" in phases) == (summary["checkpoint_bytes"] > 0) == (feature in SAVED)
    host = "cpu" if knobs.get("cpu_offload") else "cuda"
    assert run.seen["params"].keys() == run.seen["optimizer"].keys() == {host}
    if method == "dpo" and not knobs.get("lora_rank"):
        assert run.seen["reference"].keys() == {"cuda"}
    # Every training forward's attention: flash (unpadded rows, causal), or with packing the
    # block-diagonal mask's memory-efficient kernel; never the math fallback. (DPO-LoRA's
    # one-token warm-up forward under FSDP2 has a mask: memory-efficient, as on a GPU.)
    kernels = summary["attention_kernels"]
    expected = "efficient" if knobs.get("packing") else "flash"
    assert "math" not in kernels and kernels.get(expected, 0) >= 2 * LAYERS, kernels
