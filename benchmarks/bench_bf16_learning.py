"""Final losses of the bundled trainer's precisions against Hugging Face Trainer's bf16=True.

    python benchmarks/bench_bf16_learning.py [--old DIR] [--markdown] [--timeout S]

Runs the comparison of tests/trainer/test_bf16_learning.py (the counting task of
tests/trainer/learning_task.py, 80 steps, one process, lr 1e-4 and 2e-5, full fine-tune and
LoRA r8): veri-tui fp32 and bf16 from this checkout and HF's bf16=True; with `--old DIR` (a
checkout of the trainer before stochastic rounding, e.g. `git worktree add /tmp/veri-old
fe6ba95`) also that trainer's bf16 runs, from the same job files. Prints each run's final
loss (the mean of the last 10 steps), its ratio to HF's, and for full fine-tunes the share
of decoder-layer weights that moved at all. Results: docs/trainer.md, Precision.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "trainer"))

from test_bf16_learning import LORA, LRS, RUNS, final, run_all  # noqa: E402


def moved_share(root: Path, name: str) -> float | None:
    """The share of decoder-layer weight elements that differ from the initial checkpoint."""
    from safetensors.torch import load_file

    out = root / name / "output" / "model.safetensors"
    if not out.is_file():
        return None
    start, end = load_file(root / "task" / "model" / "model.safetensors"), load_file(out)
    keys = [k for k in start if ".layers." in k]
    moved = sum(int((end[k].float() != start[k].float()).sum()) for k in keys)
    return moved / sum(start[k].numel() for k in keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout of the trainer before the change")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument(
        "--timeout", type=float, default=900.0,
        help="seconds each of the two training processes may take (0: no limit; a loaded "
        "2-core machine needs more than the default)",
    )  # fmt: skip
    args = parser.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        limit = args.timeout or None
        got = run_all(root / "new", timeout=limit)
        moved = {k: moved_share(root / "new", f"{k[0]}-lr{k[1]}-r{k[2]}") for k in got}
        if args.old:
            old = run_all(root / "old", python_path=args.old, runs=[("bf16", 0), ("bf16", LORA)],
                          hf=False, timeout=limit)  # fmt: skip
            for (p, lr, r), losses in old.items():
                got[("bf16 old", lr, r)] = losses
                moved[("bf16 old", lr, r)] = moved_share(root / "old", f"{p}-lr{lr}-r{r}")
    whos = [p for p in ("fp32", "bf16 old", "bf16") if any(k[0] == p for k in got)]
    print(f"# {time.perf_counter() - t0:.0f} s; final loss = mean of the last 10 of 80 steps")
    head = ["lr", "fine-tune", "HF bf16=True", *[f"veri-tui {w}" for w in whos]]
    rows = []
    for lr in LRS:
        for lora in (0, LORA):
            hf = final(got[("hf", lr, lora)])
            cells = [f"{lr:g}", f"LoRA r{lora}" if lora else "full", f"{hf:.4f}"]
            for w in whos:
                ours = final(got[(w, lr, lora)])
                cell = f"{ours:.4f} ({100 * (ours / hf - 1):+.1f}%)"
                share = moved[(w, lr, lora)] if not lora else None
                cells.append(cell + (f", {100 * share:.0f}% moved" if share is not None else ""))
            rows.append(cells)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        for r in [head, *rows]:
            print("  ".join(f"{c:<28}" for c in r))
    assert {p for p, _ in RUNS} >= {"fp32", "bf16"}


if __name__ == "__main__":
    main()
