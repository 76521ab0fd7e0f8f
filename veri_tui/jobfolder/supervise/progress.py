"""Where each rank is: its step and phase, rewritten in place at every phase change.

A rank's `progress/rank-<r>` (in the job folder) holds one fixed-size line,
``<seq> <step> <phase>``, padded to `RECORD_BYTES` and written with one ``pwrite`` at offset
0: no new file, no rename, no fsync (a crash may lose the last mark, which only matters while
the rank runs). One mark costs a few microseconds (benchmarks/bench_trainer_overhead.py).

Phases, in the order a step passes through them: `data` (the batch and the global token count, an
all-reduce), then `forward` and `backward` once per micro-batch, `optimizer` (clipping, the update,
the loss all-reduce), then `checkpoint` on a checkpoint step (and `gate` while a canary waits for
its decision, veri_tui/jobfolder/canary/canary.py); `rendezvous` while joining the process group and
`load` after it (marked again as the data, the model and its sharding are each done) before the
first step, `artifact` after the last, `done` once the artifact is written.

Every rank marks the same phases in the same order, so `seq` (marks made so far) orders the ranks by
progress: the supervisor's watchdog (veri_tui/jobfolder/supervise/watchdog.py) reads these files
and, when no rank has advanced for `hang_timeout_s`, blames the rank(s) with the smallest `seq`.

Stdlib only: the supervisor imports the reader, the ranks (veri_tui/trainer/loop.py) the writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from veri_tui.jobfolder.contract.layout import JobLayout

PHASES = (
    "rendezvous",
    "load",
    "data",
    "forward",
    "backward",
    "optimizer",
    "eval",
    "checkpoint",
    "gate",
    "artifact",
    "done",
)
#: Phases that may legitimately take much longer than a step: the watchdog waits longer.
SLOW_PHASES = ("rendezvous", "load", "eval", "checkpoint", "gate", "artifact")
#: Before the first step: the watchdog's load timeout applies
# (veri_tui/jobfolder/supervise/watchdog.py).
LOAD_PHASES = ("rendezvous", "load")
RECORD_BYTES = 64


def progress_path(job_dir: Path | str, rank: int) -> Path:
    """`progress/rank-<r>`: rank ``rank``'s progress line."""
    return JobLayout(Path(job_dir)).rank_progress(rank)


class Mark(NamedTuple):
    """One rank's last mark: how many marks it made, its step (1-based) and phase."""

    seq: int
    step: int
    phase: str


class Progress:
    """The rank's writer: one open file, one ``pwrite`` per mark. Never raises: progress is
    a report, and a full or vanished disk must not stop the training it reports on."""

    def __init__(self, job_dir: Path | str, rank: int) -> None:
        self.seq = 0
        self.step = 0
        self._fd: int | None = None
        path = progress_path(job_dir, rank)
        try:
            path.parent.mkdir(exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError:
            pass

    def mark(self, phase: str, step: int | None = None) -> None:
        """Record that this rank entered ``phase`` (of ``step``, else the current step)."""
        if step is not None:
            self.step = step
        self.seq += 1
        if self._fd is None:
            return
        line = f"{self.seq} {self.step} {phase}".encode().ljust(RECORD_BYTES - 1) + b"\n"
        try:
            os.pwrite(self._fd, line, 0)
        except OSError:
            pass

    def close(self) -> None:
        """Close the file (the line stays for the supervisor to read)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class NoProgress(Progress):
    """A writer that records nothing (benchmarks and tests that run a bare step)."""

    def __init__(self) -> None:
        self.seq = 0
        self.step = 0
        self._fd = None


def _parse(raw: bytes) -> Mark | None:
    parts = raw.decode("ascii", "replace").split()
    if len(parts) != 3 or parts[2] not in PHASES:
        return None
    try:
        return Mark(int(parts[0]), int(parts[1]), parts[2])
    except ValueError:
        return None


def read_progress(job_dir: Path | str, rank: int) -> Mark | None:
    """Rank ``rank``'s last mark, or None (no mark yet, or a line caught mid-write).

    A read may overlap the rank's in-place write; two equal reads in a row are a whole line.
    """
    path = progress_path(job_dir, rank)
    try:
        with open(path, "rb") as fh:
            first = fh.read(RECORD_BYTES)
            fh.seek(0)
            second = fh.read(RECORD_BYTES)
    except OSError:
        return None
    return _parse(first) if first == second else None
