"""Write tests/fixtures/golden_losses.json: the tiny model's first 20 losses at stages 0, 2, 3.

    python scripts/make_golden_losses.py [--runs 2] [--out tests/fixtures/golden_losses.json]

Runs the real trainer (torchrun, 2 CPU ranks on gloo, one thread each) on the golden
configuration of tests/trainer/trainer_jobs.py (`golden_config()`: full fine-tune sft_text
on assets/data/sft.jsonl, bf16, global batch 4, seed 42) `--runs` times, and stores the
first run's losses with what was measured: the largest relative difference between the runs
(the run-to-run noise) and between stages (0 runs DDP with autocast, 2 and 3 FSDP2 with a
mixed-precision policy: the same training, reduced and rounded in another order).
tests/trainer/test_golden_loss.py reruns the configuration and compares each step.

Regenerate only for a change that is meant to alter training, and say so in its commit.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "trainer"))

from trainer_jobs import golden_config, golden_losses  # noqa: E402


def max_rel(a: list[float], b: list[float]) -> float:
    """The largest per-step |a - b| / b."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2, help="runs to compare (noise); first is kept")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "golden_losses.json")
    args = ap.parse_args()
    import torch

    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        runs = [golden_losses(Path(tmp) / f"run-{i}") for i in range(args.runs)]
    first = runs[0]
    stages = sorted(first, key=int)
    noise = max((max_rel(r[z], first[z]) for r in runs[1:] for z in stages), default=0.0)
    pairs = itertools.combinations(stages, 2)
    between = {f"{a}-{b}": max_rel(first[a], first[b]) for a, b in pairs}
    fixture = {
        "about": "tiny model, first steps' losses per zero_stage; scripts/make_golden_losses.py",
        "config": golden_config(),
        "torch": torch.__version__,
        "measured": {
            "runs": args.runs,
            "run_to_run_max_rel": noise,
            "between_stages_max_rel": between,
        },
        "losses": {z: first[z] for z in stages},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(fixture, indent=1) + "\n")
    os.replace(tmp, args.out)
    print(f"{args.out}: run to run {noise:.1e}; between stages " + json.dumps(between))


if __name__ == "__main__":
    main()
