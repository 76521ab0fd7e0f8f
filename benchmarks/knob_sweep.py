"""Every plan record over a wide sweep of knobs and models, one JSON file each, to compare a
refactor of the planner against the code before it (`diff -r BEFORE AFTER` prints nothing).

A record is what `veri-tui plan --json` prints (`PlanRecord.to_dict()`, indented by 2); a
job the planner refuses is written as its refusal's text. The models are the two bundled
ones and header-only checkpoints shaped like public models (tests/support/synthetic.py:
dense, mixture-of-experts, latent attention), written into `--models` so that the records
name the same paths on both sides. The knobs: method, precision, zero_stage (auto and each
stage), the checkpointing mode, LoRA (and QLoRA on one GPU), cpu_offload, GPU count and
micro-batch size; and per model, the activation terms of every checkpointing mode, LoRA,
autocast, loss and LoRA dropout (the terms other trainers' runs are planned with). VERI_HOME
is an empty folder of the sweep's own, so no calibration from earlier runs enters a record.

    python benchmarks/knob_sweep.py OUT [--models DIR]

Prints the number of records written. It is a check for a refactor, not a benchmark of
speed: the figures are the records themselves.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import synthetic  # noqa: E402

HEADER_ONLY = {
    "qwen3-0.6b": synthetic.QWEN3_0_6B,
    "llama-3.1-8b": synthetic.LLAMA_3_1_8B,
    "llama-3.1-70b": synthetic.LLAMA_3_1_70B,
    "qwen3-30b-a3b": synthetic.QWEN3_30B_A3B,
    "mixtral-8x7b": synthetic.MIXTRAL_8X7B,
    "deepseek-v2-lite": synthetic.DEEPSEEK_V2_LITE,
    "deepseek-v3": synthetic.DEEPSEEK_V3,
    "gpt-oss-20b": synthetic.GPT_OSS_20B,
}
# The cross product of these for every model (a refused combination is recorded as refused).
GRID: dict[str, list[Any]] = {
    "method": ["sft_text", "dpo"],
    "precision": ["bf16", "fp32"],
    "zero_stage": ["auto", 0, 2, 3],
    "activation_checkpointing": ["none", "selective", "full"],
    "lora_rank": [0, 16],
    "gpu_count": [1, 8],
}
# Beside the grid, one variant each of the base job (stage 3, 8 GPUs, full checkpointing).
VARIANTS: list[dict[str, Any]] = [
    {"cpu_offload": True},
    {"cpu_offload": True, "lora_rank": 16},
    {"gpu_count": 1, "zero_stage": 0, "lora_rank": 16, "load_in_4bit": True},
    {"gpu_count": 1, "zero_stage": 0, "lora_rank": 64, "load_in_4bit": True, "precision": "fp32"},
    {"micro_batch_size": 4},
    {"micro_batch_size": 4, "activation_checkpointing": "none", "zero_stage": 0},
    {"max_seq_length": 8192, "activation_checkpointing": "selective"},
    {"gpu": "L4-24GB", "gpu_count": 2},
    {"gpu_count": 16},
    {"lora_rank": 8, "lora_target_modules": ["q_proj", "v_proj"]},
    {"eval_fraction": 0.1},
]
BASE = {"gpu": "H100-80GB", "micro_batch_size": 2, "max_seq_length": 2048}


def models(folder: Path) -> dict[str, str]:
    """Every model of the sweep by name: its path (header-only ones written once)."""
    from veri_tui.bundled import assets_dir

    out = {
        "tiny-model": str(assets_dir() / "tiny-model"),
        "tiny-moe": str(assets_dir() / "tiny-moe"),
    }
    for name, config in HEADER_ONLY.items():
        path = folder / name
        if not (path / "config.json").exists():
            synthetic.write_checkpoint(path, config)
        out[name] = str(path)
    return out


def jobs() -> list[dict[str, Any]]:
    """The knob sets of the sweep, model aside."""
    grid = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    base = {"zero_stage": 3, "gpu_count": 8, "activation_checkpointing": "full"}
    return grid + [{**base, **v} for v in VARIANTS]


def record(model: str, knobs: dict[str, Any]) -> str:
    """The plan's JSON as `veri-tui plan --json` prints it, or the refusal's text."""
    from veri_tui.errors import VeriError
    from veri_tui.plan import plan

    try:
        rec = plan(model=model, **{**BASE, **knobs})
    except VeriError as e:
        return f"refused: {e}\n"
    return json.dumps(rec.to_dict(), indent=2) + "\n"


def terms(path: str) -> str:
    """The activation terms of one model for every mode, LoRA, autocast, loss and LoRA
    dropout (the terms other trainers' published runs are planned with,
    benchmarks/memory_accuracy.py), one line each."""
    from veri_tui.plan import read_model_info
    from veri_tui.plan.activations import ActivationModel
    from veri_tui.plan.losses import LOSSES

    info = read_model_info(path)
    lines = []
    for mode, lora, autocast, loss, dropout in itertools.product(
        ("none", "selective", "full"), (0, 16), (False, True), sorted(LOSSES), (False, True)
    ):
        model = ActivationModel.of(info, mode, lora_rank=lora, autocast=autocast)
        t = model.terms(4096, loss=loss, lora_dropout=dropout)
        lines.append(json.dumps([mode, lora, autocast, loss, dropout, list(t)]))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for the records (made; must be empty)")
    ap.add_argument(
        "--models", type=Path, default=Path(tempfile.gettempdir()) / "knob-sweep-models"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        print(f"error: {args.out} is not empty", file=sys.stderr)
        return 2
    os.environ["VERI_HOME"] = tempfile.mkdtemp(prefix="knob-sweep-home-")
    count = 0
    for name, path in models(args.models).items():
        (args.out / f"{name}.terms.jsonl").write_text(terms(path))
        count += 1
        for i, knobs in enumerate(jobs()):
            label = "_".join(f"{k}={v}" for k, v in knobs.items()).replace("/", "-")
            (args.out / f"{name}.{i:04d}.{label}.json").write_text(record(path, knobs))
            count += 1
    print(f"{count} records in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
