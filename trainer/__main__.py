"""Rank entry: `torchrun --nproc-per-node N -m trainer --job <job_dir>/job.json`.

Each rank writes its pid, runs the loop, and on any failure writes its own failure record
(failures/rank-<r>.json, nanosecond time) before the exception propagates to torch
elastic's `record`, which writes the elastic error file for `Exception`s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from trainer.config import from_spec, load_spec
from trainer.report import RankContext, RankLog, write_failure, write_pid

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, type=Path, help="job.json (or a bare spec)")
    return parser.parse_args(argv)


def _return_freed_memory() -> None:
    """Large allocations (1 MiB and up) get their own mmap, so freeing returns them.

    glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), after
    which FSDP2's per-unit gather buffers come from the heap and stay resident: a LoRA step
    on a 0.6B model kept 0.9-2.5 GB more per rank this way (benchmarks/bench_host_memory.py).
    Fixing the threshold stops that. A MALLOC_MMAP_THRESHOLD_ the user set wins; no glibc:
    nothing is done.
    """
    import ctypes
    import os

    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 1 << 20)
    except (AttributeError, OSError):
        pass


@record
def main(argv: list[str] | None = None) -> int:
    """Run one rank; failures are recorded, then re-raised for torchrun to see."""
    _return_freed_memory()
    args = _parse(argv)
    job_dir = args.job.resolve().parent
    ctx = RankContext.from_env(job_dir)
    log = RankLog(ctx)  # writes on rank 0 only
    try:
        write_pid(ctx)
        cfg = from_spec(load_spec(args.job), job_dir)
        from trainer.loop import train  # after the spec is read: a bad spec fails fast

        _start_memory_log(ctx)
        train(cfg, ctx, log)
    except SystemExit as exc:
        if exc.code not in (0, None):
            write_failure(ctx, exc)
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        write_failure(ctx, exc)
        raise
    finally:
        log.close()
        _leave_group()
    return 0


def _start_memory_log(ctx: RankContext) -> None:
    """VERI_MEASURE_MEMORY=1: the `imports` phase ends with transformers and peft imported."""
    import os

    if os.environ.get("VERI_MEASURE_MEMORY") == "1":
        import peft  # noqa: F401 - imported to be counted in the phase
        import transformers  # noqa: F401

        from trainer.measure import start_memory_log

        start_memory_log(ctx)


def _leave_group() -> None:
    """Leave the process group on success and on failure alike (once it was joined)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
