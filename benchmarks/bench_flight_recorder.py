"""What the Flight Recorder costs per collective, and how long a rank's dump answer takes.

    python benchmarks/bench_flight_recorder.py [--ops 2000] [--entries 2000]

Runs torchrun with 2 CPU processes (gloo) twice, once with `TORCH_FR_BUFFER_SIZE=<entries>` (what
the supervisor sets, veri_tui/jobfolder/failures/forensics.py) and once with the recorder off; each
rank times `--ops` all-reduces of a 2-element tensor (the trainer's token count: the collective
where the recorder's fixed cost shows most) and, with the recorder on, one dump answer as the rank's
thread writes it (veri_tui/trainer/forensics.py `answer`, a full ring of entries). Rank 0 prints
microseconds per all-reduce for both and the answer's time and size. Results go into docs/jobs.md
(Hang forensics) by hand.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rank_main(ops: int, out: Path) -> None:
    """One rank: time the all-reduces, then (recorder on) one dump answer."""
    import torch
    import torch.distributed as dist

    from veri_tui.trainer.forensics import answer

    dist.init_process_group("gloo")
    t = torch.ones(2, dtype=torch.float64)
    for _ in range(50):
        dist.all_reduce(t)  # warm-up
    t0 = time.perf_counter()
    for _ in range(ops):
        dist.all_reduce(t)
    per_op = (time.perf_counter() - t0) / ops
    line = f"all_reduce: {per_op * 1e6:.1f} us"
    if os.environ.get("TORCH_FR_BUFFER_SIZE"):
        t0 = time.perf_counter()
        path = answer(out, dist.get_rank(), "bench")
        line += f"; answer: {(time.perf_counter() - t0) * 1e3:.0f} ms, {path.stat().st_size} bytes"
    if dist.get_rank() == 0:
        print(line, flush=True)
    dist.destroy_process_group()


def run(ops: int, entries: int) -> None:
    for label, size in (("recorder off", None), (f"recorder {entries} entries", entries)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FR")}
        env.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
        env["PYTHONPATH"] = str(REPO)
        if size:
            env["TORCH_FR_BUFFER_SIZE"] = str(size)
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [
                sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", __file__, "--rank", "--ops", str(ops), "--out", tmp,
            ]  # fmt: skip
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("all_reduce")]
        print(f"{label}: {lines[0] if lines else done.stderr[-500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank:
        rank_main(args.ops, args.out)
    else:
        run(args.ops, args.entries)


if __name__ == "__main__":
    main()
