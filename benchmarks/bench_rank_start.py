"""A rank's start in CPU seconds: its imports and the model's load, the collector as the rank
runs it (off while modules import, then frozen and on) against the collector on throughout.

    python benchmarks/bench_rank_start.py [--runs 7] [--model DIR]

Each run is a fresh interpreter doing what a rank does before its first step: import
`veri_tui.trainer.__main__` (torch, the trainer's entry) and `veri_tui.trainer.loop`, then
`_imported()`, then load the tokenizer and the model with the trainer's own functions
(`load_tokenizer`, `load_base`). The "rank" runs turn the collector off first, as the entry
does when run as `-m veri_tui.trainer`; in the "collector on" runs `_imported()` finds it on
and does nothing, which is how every rank started before. Runs
alternate between the two, so drift in the machine's speed hits both alike; the figure is
each side's median of process CPU time (user + system, `time.process_time`). Every rank of
every job pays this once; the suite starts about 200 ranks. Results go into docs/trainer.md
(A rank's start) by hand.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "veri_tui" / "assets" / "tiny-model"

RUN = r"""
import sys, time
t0 = time.process_time()
if sys.argv[1] == "rank":  # as `-m veri_tui.trainer` runs the entry (its __name__ check)
    import gc
    gc.disable()
import veri_tui.trainer.__main__ as entry
from veri_tui.trainer.loop import train  # noqa: F401 - the rank imports it here
entry._imported()
from pathlib import Path
import torch
from veri_tui.trainer.model import load_base, load_tokenizer
imported = time.process_time() - t0
path = Path(sys.argv[2])
load_tokenizer(path)
load_base(path, torch.bfloat16)
print(imported, time.process_time() - t0)
"""


def one(mode: str, model: Path) -> tuple[float, float]:
    """(imports, imports + tokenizer + model) CPU seconds of one fresh run."""
    out = subprocess.run([sys.executable, "-c", RUN, mode, str(model)], capture_output=True,
                         text=True, check=True, cwd=REPO)  # fmt: skip
    imported, total = out.stdout.split()[-2:]
    return float(imported), float(total)


def main() -> None:
    """Alternate the two ways, print each one's medians and the difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each way")
    parser.add_argument("--model", type=Path, default=TINY, help="model folder to load")
    args = parser.parse_args()
    got: dict[str, list[tuple[float, float]]] = {"rank": [], "on": []}
    for i in range(args.runs):
        for mode in ("rank", "on") if i % 2 == 0 else ("on", "rank"):
            got[mode].append(one(mode, args.model))
    for mode, label in (("on", "collector on throughout"), ("rank", "as the rank runs it")):
        imports = statistics.median(r[0] for r in got[mode])
        total = statistics.median(r[1] for r in got[mode])
        print(f"{label:24s}  imports {imports:.2f} CPU-s  with the loads {total:.2f} CPU-s")
    saved = statistics.median(a[1] - b[1] for a, b in zip(got["on"], got["rank"], strict=True))
    print(f"saved per rank: {saved:.2f} CPU-s (median of paired runs, {args.runs} each)")


if __name__ == "__main__":
    main()
