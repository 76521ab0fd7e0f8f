"""The bf16 AdamW's host kernel: adamw_native.c, built once per machine, run on every thread.

Used for parameters in host memory: a CPU run, and cpu_offload, where FSDP2's
CPUOffloadPolicy keeps each rank's shards and states on the host and the update runs there.
torch.compile's C++ backend fuses the same update but (torch 2.13) moves every fp32 <-> int32
bitcast through memory one element at a time, 4x the time of the rest; a plain C loop that
GCC or clang vectorises needs none of it and builds in under a second, no torch headers.

Built with the machine's C compiler ($CC, else cc, gcc or clang) into the user's cache
(XDG_CACHE_HOME or ~/.cache, veri-tui/kernels/), named by a hash of the source and the
compiler, written to a temporary name and renamed, so ranks building at once each get a whole
file. No compiler, or a failed build: `load()` returns None with the reason in `why`, and the
optimizer runs its eager way.

`run` splits the group's elements into one range per intra-op thread (torch.get_num_threads():
under cpu_offload the trainer gives each rank its share of the cores) and calls the kernel
from that many Python threads; ctypes releases the GIL for the call, so they run in parallel.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from veri_tui.trainer.adamw_batch import Piece

SOURCE = Path(__file__).with_name("adamw_native.c")
FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared")
KERNEL = "veri_adamw_bf16"  # the C function, and its name in a profile
why = ""  # the reason load() found no kernel, for the run's log
_P = ctypes.c_void_p
_ARGS: list[Any] = [ctypes.c_int64, _P, _P, _P, _P, _P, _P, _P, ctypes.c_uint32, _P,
                    ctypes.c_int64, ctypes.c_int64]  # fmt: skip


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "veri-tui" / "kernels"


@functools.cache
def load() -> Any:
    """The built kernel's entry point (a ctypes function), or None (the reason in `why`)."""
    global why
    cc = _compiler()
    if cc is None:
        why = "no C compiler ($CC, cc, gcc or clang)"
        return None
    try:
        text = SOURCE.read_bytes()
    except OSError as err:  # an install without its package data
        why = f"{SOURCE.name} unreadable: {err}"
        return None
    tag = hashlib.sha256(text + cc.encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
    lib = _cache_dir() / f"adamw-{tag}.so"
    try:
        if not lib.is_file():
            lib.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=lib.parent, suffix=".so.tmp")
            os.close(fd)
            cmd = [cc, *FLAGS, "-o", tmp, str(SOURCE)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                os.unlink(tmp)
                why = f"{cc} failed: {done.stderr.strip().splitlines()[-1:]}"
                return None
            os.replace(tmp, lib)
        fn = getattr(ctypes.CDLL(str(lib)), KERNEL)
    except (OSError, subprocess.SubprocessError) as err:
        why = f"building {lib.name}: {err}"
        return None
    fn.argtypes, fn.restype = _ARGS, None
    return fn


class HostKernel:
    """Runs the kernel over a group's pieces on torch.get_num_threads() threads."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def run(self, pieces: Sequence[Piece], hyper: Sequence[float], step_key: int) -> None:
        """Update every piece (bf16 weights, gradients and states in host memory) in place;
        `step_key` is the step's key (signed int32), mixed with each piece's in C."""
        fn = load()
        assert fn is not None  # the optimizer picks this way only when load() built it
        count = len(pieces)
        offset = [0]
        for p in pieces:
            offset.append(offset[-1] + p.w.numel())
        ptrs = [(_P * count)(*(getattr(p, k).data_ptr() for p in pieces)) for k in "wgmv"]
        args = (
            count, *ptrs, (ctypes.c_int64 * (count + 1))(*offset),
            (ctypes.c_uint32 * count)(*(p.start for p in pieces)),
            (ctypes.c_uint32 * count)(*(p.key & 0xFFFFFFFF for p in pieces)),
            step_key & 0xFFFFFFFF, (ctypes.c_float * 8)(*hyper),
        )  # fmt: skip
        total, threads = offset[-1], max(1, torch.get_num_threads())
        if threads == 1 or total < threads * 65536:  # too little to share
            _call(fn, args, 0, total)
            return
        if self._pool is None or self._pool._max_workers != threads:
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="veri-adamw")
        cuts = [total * k // threads for k in range(threads + 1)]
        ranges = zip(cuts, cuts[1:], strict=False)
        jobs = [self._pool.submit(_call, fn, args, lo, hi) for lo, hi in ranges]
        for job in jobs:
            job.result()


def _call(fn: Any, args: tuple[Any, ...], lo: int, hi: int) -> None:
    """One kernel call, named for the profiler (benchmarks/bench_optimizer.py counts it)."""
    with torch.profiler.record_function(KERNEL):
        fn(*args, lo, hi)
