"""Run several planned jobs one after another inside ONE torchrun (test speed-up).

`torchrun --nproc-per-node 2 tests/trainer/run_many.py JOB.json [JOB.json ...]`: each job
goes through the trainer's own `train()` exactly as `python -m trainer --job` runs it, so
only the process start and the process group are shared (a torchrun start costs seconds,
and the state-measurement matrix has two dozen jobs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist

from trainer.config import from_spec, load_spec
from trainer.loop import train
from trainer.report import RankContext, RankLog


def main(paths: list[str]) -> None:
    """Train each job in turn."""
    for p in map(Path, paths):
        ctx = RankContext.from_env(p.parent)
        log = RankLog(ctx)
        try:
            train(from_spec(load_spec(p), p.parent), ctx, log)
        finally:
            log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
