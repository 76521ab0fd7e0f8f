"""The activation model against what a Qwen3-0.6B-shaped model keeps, at real shapes.

    python benchmarks/bench_activations.py [--seq 1024 4096] [--markdown]

Each configuration runs one sample through transformers' Qwen3 with Qwen3-0.6B's config as
the trainer runs it (tests/support/saved_bytes.py: its checkpointing mode, LoRA on its
targets, fp32 weights under autocast at stage 0, the chunked loss, backward) under
FakeTensorMode: shapes decide the bytes, so nothing is allocated (tests/plan/
test_saved_tensors.py checks on small shapes that fake tensors count what real ones do).
It prints what is kept once the loss is computed and the peak after any op, measured and
planned (veri_tui/plan/activations.py), in decimal GB. Results: docs/trainer.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.saved_bytes import measure_step  # noqa: E402
from support.synthetic import QWEN3_0_6B, write_checkpoint  # noqa: E402

from veri_tui.plan import read_model_info  # noqa: E402
from veri_tui.plan.activations import ActivationModel  # noqa: E402

# (label, LoRA rank, autocast): bf16 full fine-tune, LoRA rank 16, fp32 weights at stage 0.
VARIANTS = [("full bf16", 0, False), ("LoRA r16", 16, False), ("full fp32 (stage 0)", 0, True)]
MODES = ("none", "selective", "full")


def rows(seqs: list[int]) -> list[dict]:
    """Measure and plan every configuration."""
    with tempfile.TemporaryDirectory() as tmp:
        write_checkpoint(Path(tmp) / "qwen3-0.6b", QWEN3_0_6B)
        info = read_model_info(str(Path(tmp) / "qwen3-0.6b"))
    out = []
    for seq in seqs:
        for label, lora, autocast in VARIANTS:
            for mode in MODES:
                start = time.perf_counter()
                m = measure_step(
                    QWEN3_0_6B, mode=mode, tokens=seq, lora_rank=lora, autocast=autocast,
                    fake=True,
                )  # fmt: skip
                p = ActivationModel.of(info, mode, lora_rank=lora, autocast=autocast).terms(seq)
                out.append({
                    "seq": seq, "variant": label, "mode": mode, "kept": m["kept"],
                    "peak": m["peak"], "plan_kept": p.kept, "plan_peak": p.peak,
                    "phase": p.phase, "seconds": time.perf_counter() - start,
                })  # fmt: skip
                print(_line(out[-1]), flush=True)
    return out


def _line(r: dict) -> str:
    return (
        f"| {r['seq']} | {r['variant']} | {r['mode']} | {r['kept'] / 1e9:.3f} | "
        f"{r['plan_kept'] / 1e9:.3f} | {r['plan_kept'] / r['kept']:.4f} | {r['peak'] / 1e9:.3f} | "
        f"{r['plan_peak'] / 1e9:.3f} | {r['plan_peak'] / r['peak']:.4f} | {r['phase']} |"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the configurations and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, nargs="+", default=[1024, 4096])
    args = p.parse_args(argv)
    print(
        "| seq | variant | checkpointing | kept GB measured | plan | ratio | peak GB measured "
        "| plan | ratio | peak moment (plan) |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    results = rows(args.seq)
    worst = max(abs(r["plan_peak"] / r["peak"] - 1) for r in results)
    took = sum(r["seconds"] for r in results)
    print(f"\n{len(results)} configurations, worst peak ratio off by {worst:.2%}, {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
