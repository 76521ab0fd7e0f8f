"""Rank entry: `torchrun --nproc-per-node N -m veri_tui.trainer --job <job_dir>/job.json`.

Each rank writes its pid, runs the loop, and on any failure writes its own failure record
(failures/rank-<r>.json, nanosecond time) before the exception propagates to torch elastic's
`record`, which writes the elastic error file for `Exception`s. A clean run destroys its process
group; a failed one aborts it (`_leave_group`), so the rank exits. Every rank gets
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` unless the user set one, before this module
imports torch (the supervisor already put it in torchrun's environment:
veri_tui/jobfolder/supervise/torchrun_cmd.py); what the allocator then runs with is recorded from
the allocator itself (veri_tui/trainer/devmem.py).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from pathlib import Path
from typing import NoReturn

from veri_tui.jobfolder.supervise.torchrun_cmd import alloc_conf

alloc_conf(os.environ)  # before the first import of torch (next line): the allocator's setting
if __name__ == "__main__":  # a rank (`-m veri_tui.trainer`), not a test importing `leave`
    gc.disable()  # no cyclic collection while torch and the trainer's modules import (_imported)

from torch.distributed.elastic.multiprocessing.errors import record  # noqa: E402

from veri_tui.trainer.config import from_spec, load_spec  # noqa: E402
from veri_tui.trainer.report import (  # noqa: E402
    RankContext,
    RankLog,
    write_failure,
    write_pid,
)

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m veri_tui.trainer", description=__doc__.splitlines()[0]
    )
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
    clean = False
    try:
        write_pid(ctx)
        cfg = from_spec(load_spec(args.job), job_dir)
        from veri_tui.trainer.loop import train  # after the spec is read: a bad spec fails fast

        _imported()
        _start_memory_log(ctx)
        train(cfg, ctx, log)
        clean = True
    except SystemExit as exc:
        clean = exc.code in (0, None)
        if not clean:
            write_failure(ctx, exc)
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        write_failure(ctx, exc)
        raise
    finally:
        log.close()
        _leave_group(clean)
    return 0


def _imported() -> None:
    """Turn the cyclic collector back on, the imported modules' objects set aside for good.

    Importing torch and the trainer creates several hundred thousand objects that live as
    long as the process; with the collector on, its full passes walk them again and again
    while they load: 0.6-1.1 CPU-s of a rank's ~5.5 s start here (benchmarks/bench_rank_start.py,
    docs/trainer.md). `gc.freeze` moves them to a generation no collection visits; from
    here on (the model's load, the steps) the collector runs as usual, so cyclic garbage
    that holds tensors is collected as before. Only imports run while it is off.
    """
    if not gc.isenabled():  # turned off above: this process is a rank
        gc.freeze()
        gc.enable()


def _start_memory_log(ctx: RankContext) -> None:
    """VERI_MEASURE_MEMORY=1: the `imports` phase ends with transformers and peft imported."""
    if os.environ.get("VERI_MEASURE_MEMORY") == "1":
        import peft  # noqa: F401 - imported to be counted in the phase
        import transformers  # noqa: F401

        from veri_tui.trainer.measure import start_memory_log

        start_memory_log(ctx)


def _leave_group(clean: bool) -> None:
    """Leave the process group (once it was joined): destroy it after a clean run, abort it
    after a failure.

    `destroy_process_group` flushes the pending NCCL work first, and a failed rank's peers
    may never complete theirs: it can block (pytorch #141510), torchrun never sees the rank
    exit, and the hang watchdog later reports RANK_HUNG (platform, retried) for what was,
    say, a CUDA OOM. torchtitan destroys on success only. Aborting (torch's
    `_abort_process_group`, the one call that ends every group without waiting; private in
    torch 2.11-2.13, so used only when present) ends this rank's communicators at once, and
    peers blocked on it see their connection close. Should abort itself fail, the process
    exits without destroying: the record and the error file are already written.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if clean:
        dist.destroy_process_group()
        return
    from torch.distributed import distributed_c10d

    abort = getattr(distributed_c10d, "_abort_process_group", None)
    if abort is None:
        return
    try:
        abort()
    except Exception:  # noqa: BLE001, S110 - we are failing already; exiting is what matters
        pass


def leave(code: int) -> NoReturn:
    """End the rank with ``code`` without the interpreter's teardown, its logs flushed.

    Called after `main` returned, when everything the run leaves is written and closed (the
    record, metrics, checkpoints, the trackers: RankLog.close) and the group destroyed. gloo
    ranks have aborted in that teardown after a clean `destroy_process_group` (libstdc++'s
    `terminate called without an active exception`, SIGABRT: docs/reliability.md, Known
    defects); torchrun would then report a finished rank as failed. A failure raises out of
    `main` and exits the usual way, with its traceback.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe must not turn success into failure
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main() or 0)  # `record` types its return as optional
