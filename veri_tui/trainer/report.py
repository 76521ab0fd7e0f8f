"""What a rank reports: the rank-0 log and metrics, pid files, and per-rank failure records.

The failure record (docs/interfaces.md section 2) is the trainer's own, written atomically
with a nanosecond timestamp before the exception propagates: torch elastic's `record` only
sees `Exception`s and stamps whole seconds, and the supervisor must tell the first failing
rank from peers that merely saw its connection close.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from veri_tui.jobfolder.contract.atomic import write_json_atomic, write_text_atomic
from veri_tui.jobfolder.contract.errors import TrainerError
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.jobfolder.contract.record import RankFailure
from veri_tui.jobfolder.failures.failure_rules import classify_exceptions


@dataclass(frozen=True)
class RankContext:
    """Who this process is in the job (torchrun's environment)."""

    rank: int
    local_rank: int
    node: int
    world_size: int
    job_dir: Path

    @classmethod
    def from_env(cls, job_dir: Path) -> RankContext:
        """Read RANK, LOCAL_RANK, GROUP_RANK and WORLD_SIZE (1 process when unset)."""
        env = os.environ
        return cls(
            rank=int(env.get("RANK", 0)),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            node=int(env.get("GROUP_RANK", 0)),
            world_size=int(env.get("WORLD_SIZE", 1)),
            job_dir=Path(job_dir),
        )


def atomic_write(path: Path, text: str) -> None:
    """jobfolder's atomic writer (readers never see half a file), making the folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def write_pid(ctx: RankContext) -> None:
    """pids/rank-<r>: lets cancel end workers that torchrun lost track of."""
    atomic_write(JobLayout(ctx.job_dir).rank_pid(ctx.rank), f"{os.getpid()}\n")


def _chain(exc: BaseException) -> list[BaseException]:
    out, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        out.append(cur)
        # DCP's CheckpointException keeps the per-rank causes as (exception, trace) pairs.
        failures = getattr(cur, "failures", None)
        if isinstance(failures, dict):
            for pair in failures.values():
                inner = pair[0] if isinstance(pair, tuple) else pair
                if isinstance(inner, BaseException):
                    out.append(inner)
        cur = cur.__cause__ or cur.__context__
    return out


def classify(exc: BaseException) -> tuple[str, bool]:
    """(error code, peer_failure) for an exception that ended a rank: the table of
    veri_tui/jobfolder/failures/failure_rules.py over the exception, its causes and DCP's
    per-rank causes."""
    return classify_exceptions(_chain(exc))


def describe(exc: BaseException) -> str:
    """A one-line message; DCP's CheckpointException is described by its causes."""
    message = exc.message if isinstance(exc, TrainerError) else str(exc)
    causes = getattr(exc, "failures", None)
    if isinstance(causes, dict) and causes:  # "CheckpointException ranks:..." says little
        inner = [pair[0] if isinstance(pair, tuple) else pair for pair in causes.values()]
        message = f"{type(exc).__name__}: " + "; ".join(f"{type(e).__name__}: {e}" for e in inner)
    message = message.strip()
    return message.splitlines()[0] if message else type(exc).__name__


def failure_record(ctx: RankContext, exc: BaseException) -> RankFailure:
    """The per-rank record of docs/interfaces.md section 2."""
    code, peer = classify(exc)
    return {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "node": ctx.node,
        "world_size": ctx.world_size,
        "time_ns": time.time_ns(),
        "type": type(exc).__name__,
        "code": code,
        "message": describe(exc),
        "peer_failure": peer,
        "traceback": "".join(traceback.format_exception(exc)),
    }


def write_failure(ctx: RankContext, exc: BaseException) -> RankFailure:
    """Write failures/rank-<r>.json atomically; never raises (we are already failing)."""
    record = failure_record(ctx, exc)
    try:
        path = JobLayout(ctx.job_dir).rank_failure(ctx.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, record)
    except OSError:
        pass
    return record


class RankLog:
    """Rank 0's log.txt and metrics.jsonl (append, flushed per line); other ranks: no-op."""

    def __init__(self, ctx: RankContext) -> None:
        self.ctx = ctx
        self._log: TextIO | None = None
        self._metrics: TextIO | None = None
        # Run first by close(): the trackers' (veri_tui/trainer/tracking.py), on success or failure.
        self.closers: list[Callable[[], None]] = []
        if ctx.rank == 0:
            ctx.job_dir.mkdir(parents=True, exist_ok=True)
            layout = JobLayout(ctx.job_dir)
            self._log = open(layout.log, "a", encoding="utf-8")
            self._metrics = open(layout.metrics, "a", encoding="utf-8")

    def info(self, line: str) -> None:
        """One human-readable line in log.txt (rank 0 only)."""
        if self._log is not None:
            self._log.write(line.rstrip("\n") + "\n")
            self._log.flush()

    def metric(self, record: dict[str, Any]) -> None:
        """One JSON metric line in both log.txt and metrics.jsonl (rank 0 only)."""
        line = json.dumps(record)
        self.info(line)
        if self._metrics is not None:
            self._metrics.write(line + "\n")
            self._metrics.flush()

    def rewind(self, step: int) -> None:
        """On resume: drop metric lines past `step` so each step appears once in metrics.jsonl.

        log.txt keeps its whole history (what a person reads); metrics.jsonl is what charts
        read, and the resumed run writes those steps again.
        """
        if self._metrics is None:
            return
        self._metrics.close()
        path = JobLayout(self.ctx.job_dir).metrics
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line + "\n")
            except ValueError:
                continue  # a torn last line from a killed run
        atomic_write(path, "".join(kept))
        self._metrics = open(path, "a", encoding="utf-8")

    def close(self) -> None:
        """Close the trackers, then the files (rank 0)."""
        for close in self.closers:
            close()
        for fh in (self._log, self._metrics):
            if fh is not None:
                fh.close()
