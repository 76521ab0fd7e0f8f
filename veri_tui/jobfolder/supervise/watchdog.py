"""The hang watchdog: a job whose ranks stopped advancing is ended and the laggard blamed.

The supervisor (veri_tui/jobfolder/supervise.py) polls `HangWatch.poll` in its wait loop. It reads
every rank's progress line (veri_tui/jobfolder/supervise/progress.py) once a second and notes when
each last changed. When no rank has advanced for the timeout, the job has hung: a rank stopped (a
stuck GPU, a frozen process) and the others wait for it in a collective. The rank(s) with the fewest
marks are the ones furthest behind and are blamed:

    rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step 7 (forward)
    for 15 s; the other ranks waited in a collective          (one line)

code RANK_HUNG, attribution platform. When several ranks are equally far behind (the stuck
one and its waiting peers can stand in the same phase), a rank whose process is stopped
(SIGSTOP, a debugger) or in uninterruptible sleep (a hung driver or file system) is the one
blamed; otherwise all of them are named.

The timeout: the job's `hang_timeout_s` when set, else `FLOOR_S` or `STEP_FACTOR` times the
slowest step (the plan's predicted step time, and each step measured here so far), whichever
is longer; `SLOW_FACTOR` times that while any rank loads, checkpoints or writes the artifact.
The watchdog arms once some rank has reached its first step; before that (the rendezvous and
the load: joining the process group, the data, the model) the job's `load_timeout_s` (default
`LOAD_TIMEOUT_S`) bounds how long no rank may advance. Process groups get a timeout above both
(`environment`), so the watchdog speaks first.

Before it ends anything, the watchdog asks every rank for its Flight Recorder dump and Python stack
(veri_tui/jobfolder/failures/forensics.py, veri_tui/trainer/forensics.py) and the report says which
collective the job waited in, who never entered it and where those ranks stood
(veri_tui/jobfolder/failures/hangreport.py); those ranks are blamed, over the progress marks, which
under NCCL run ahead of the GPU.

Stdlib only, like the supervisor that imports it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import LOG, PROGRESS
from veri_tui.jobfolder.contract.procs import end_processes, rank_pid_path, read_pid
from veri_tui.jobfolder.contract.record import JobError, job_error, plan_line_of
from veri_tui.jobfolder.contract.status import FailureCode
from veri_tui.jobfolder.failures import forensics
from veri_tui.jobfolder.failures.failures import append_report
from veri_tui.jobfolder.failures.hangreport import Explanation, explain
from veri_tui.jobfolder.supervise.progress import LOAD_PHASES, SLOW_PHASES, Mark, read_progress

FLOOR_S = 300.0  # the shortest derived timeout: a slow first step, a busy disk or network
STEP_FACTOR = 10.0  # x the slowest step seen or predicted
SLOW_FACTOR = 4.0  # loading, checkpoint and artifact phases
POLL_S = 1.0  # how often the progress files are read
#: No rank advancing for this long before the first step (rendezvous, data, model) is a hang:
#: the process groups' default timeout, which a rank waiting for a peer's load already met.
LOAD_TIMEOUT_S = 30 * 60.0
#: The process groups' timeout when nothing else is set: the one value, which the trainer
#: (veri_tui/trainer/parallelize.py) reads from here.
DIST_TIMEOUT_S = 30 * 60
DIST_TIMEOUT_ENV = "VERI_DIST_TIMEOUT_S"
MARGIN_S = 60.0  # the process groups' timeout stays this far above the watchdog's


def _seconds(value: Any) -> float | None:
    """A positive number of seconds, or None (unset or unusable: the trainer refuses a bad
    knob itself, with CONFIG_ERROR; the watchdog then falls back to its default)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out > 0 else None


def first_timeout_s(spec: Mapping[str, Any]) -> float:
    """The timeout before any step is measured: `hang_timeout_s`, else from the floor and
    the plan's predicted step time (`spec.step_time_s`)."""
    explicit = _seconds((spec.get("hyperparameters") or {}).get("hang_timeout_s"))
    return explicit or max(FLOOR_S, STEP_FACTOR * (_seconds(spec.get("step_time_s")) or 0.0))


def load_timeout_s(spec: Mapping[str, Any]) -> float:
    """How long no rank may advance before the first step: `load_timeout_s` or the default."""
    return _seconds((spec.get("hyperparameters") or {}).get("load_timeout_s")) or LOAD_TIMEOUT_S


def dist_timeout_s(spec: Mapping[str, Any], environ: dict[str, str]) -> float:
    """The process groups' timeout for this job: the environment's (or the default 30 min),
    raised above `SLOW_FACTOR` x the watchdog's first timeout and the load timeout, each +
    `MARGIN_S` (the rendezvous itself waits this long for a rank that never joins)."""
    base = _seconds(environ.get(DIST_TIMEOUT_ENV)) or float(DIST_TIMEOUT_S)
    watched = max(SLOW_FACTOR * first_timeout_s(spec), load_timeout_s(spec))
    return max(base, watched + MARGIN_S)


class HangWatch:
    """Watches one attempt's ranks; `poll` returns the job's `error` once they hang."""

    def __init__(
        self,
        job_dir: Path,
        spec: Mapping[str, Any],
        environ: dict[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_dir = Path(job_dir)
        self.world = int(spec.get("gpu_count") or 1)
        self.nproc = int(spec.get("nproc_per_node") or self.world)
        # This node's ranks: a multi-node job has one supervisor (and job folder) per node.
        first = int(spec.get("node_rank") or 0) * self.nproc
        self.ranks = list(range(first, min(first + self.nproc, self.world)))
        self.local = set(self.ranks)  # a Slurm job's supervisor watches every node's ranks
        self.explicit = _seconds((spec.get("hyperparameters") or {}).get("hang_timeout_s"))
        self.predicted = _seconds(spec.get("step_time_s")) or 0.0
        self.load_s = load_timeout_s(spec)
        self.nnodes = int(spec.get("nnodes") or 1)
        self.dump_wait_s = forensics.DUMP_WAIT_S  # how long the ranks get to answer
        self.dist_s = dist_timeout_s(spec, dict(os.environ) if environ is None else environ)
        self.clock = clock
        self.marks: dict[int, Mark] = {}
        self.changed: dict[int, float] = {}
        self.started_at: dict[int, float] = {}  # rank -> when its pid file was first seen
        self.step_seen: dict[int, float] = {}  # rank -> when its current step was first seen
        self.slowest = 0.0  # the longest step measured so far (seconds)
        self.started = clock()
        self.next_poll = 0.0
        # A new attempt: the previous attempt's lines would read as progress already made.
        for old in (self.job_dir / PROGRESS).glob("rank-*"):
            old.unlink()

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the process-group timeout the trainer reads set above the watchdog's,
        and the Flight Recorder and NCCL settings of the forensics
        (veri_tui/jobfolder/failures/forensics.py)."""
        env = forensics.environment(env, self.job_dir)
        return dict(env, **{DIST_TIMEOUT_ENV: str(int(self.dist_s + 0.5))})

    def timeout_s(self, slow: bool) -> float:
        """How long no rank may advance before the job counts as hung."""
        if self.explicit:
            base = self.explicit
        else:
            base = max(FLOOR_S, STEP_FACTOR * max(self.predicted, self.slowest))
            # Below the process groups' timeout, so the watchdog speaks first (unless that
            # timeout was set shorter than the floor on purpose: then it speaks first).
            cap = (self.dist_s - MARGIN_S) / SLOW_FACTOR
            if cap >= FLOOR_S:
                base = min(base, cap)
        return base * SLOW_FACTOR if slow else base

    def _read(self, now: float) -> None:
        for rank in self.ranks:
            mark = read_progress(self.job_dir, rank)
            old = self.marks.get(rank)
            if mark is None or mark == old:
                continue
            self.marks[rank], self.changed[rank] = mark, now
            if old is None or mark.step != old.step:
                if old is not None and rank in self.step_seen and old.phase not in SLOW_PHASES:
                    self.slowest = max(self.slowest, now - self.step_seen[rank])
                self.step_seen[rank] = now

    def poll(self) -> JobError | None:
        """Read the progress files (at most once per `POLL_S`); the RANK_HUNG `error` when no
        rank has advanced for the timeout, else None."""
        now = self.clock()
        if now < self.next_poll:
            return None
        self.next_poll = now + POLL_S
        self._read(now)
        if all(m.phase in LOAD_PHASES for m in self.marks.values()):
            # Not armed: no rank has reached its first step. The load timeout alone applies,
            # from the newest sign of life: a rank's pid file (it started) or progress mark.
            for rank in self.ranks:
                if rank not in self.started_at and read_pid(rank_pid_path(self.job_dir, rank)):
                    self.started_at[rank] = now
            # Until the first one, SLOW_FACTOR x that: it includes interpreter start-up and
            # imports, minutes from a cold network file system.
            lives = [*self.changed.values(), *self.started_at.values()]
            limit = self.load_s if lives else SLOW_FACTOR * self.load_s
            return self.load_error(now) if now - max(lives, default=self.started) >= limit else None
        waiting = [r for r in self.ranks if r not in self.marks]  # no mark at all
        slow = bool(waiting) or any(m.phase in SLOW_PHASES for m in self.marks.values())
        last = max(self.changed.values())
        if now - last < self.timeout_s(slow):
            return None
        return self.error(now, waiting)

    def error(self, now: float, waiting: list[int]) -> JobError:
        """The RANK_HUNG error naming the rank(s) the dumps show missing from the collective
        waited in, else the one(s) furthest behind by their progress marks."""
        if waiting:
            behind, step, phase = waiting, 0, "load"
        else:
            low = min(m.seq for m in self.marks.values())
            behind = sorted(r for r, m in self.marks.items() if m.seq == low)
            step, phase = self.marks[behind[0]].step, self.marks[behind[0]].phase
        if len(behind) > 1:
            pids = {r: read_pid(rank_pid_path(self.job_dir, r)) for r in behind}
            stuck = [r for r in behind if forensics.proc_state(pids[r]) in ("T", "t", "D")]
            behind = stuck or behind
        found = self.forensics(loading=False)
        if found.blamed:
            behind = found.blamed
            mark = self.marks.get(behind[0])
            step, phase = (mark.step, mark.phase) if mark else (0, "load")
        since = min(self.changed.get(r, self.started) for r in behind)
        what = f"stopped making progress at step {step} ({phase}) for {int(now - since)} s"
        return self._report(now, what, behind, found)

    def load_error(self, now: float) -> JobError:
        """The RANK_HUNG error of a load phase (rendezvous, data, model) that stalled."""
        found = self.forensics(loading=True)
        unmarked = [r for r in self.ranks if r not in self.marks]
        behind = found.blamed or unmarked or list(self.ranks)
        lives = [*self.changed.values(), *self.started_at.values()]
        since = max(lives, default=self.started)
        what = f"no rank advanced in the load phase for {int(now - since)} s "
        what += f"(load_timeout_s {self.load_s:.0f} s{'' if lives else f' x {SLOW_FACTOR:g}'})"
        if not found.headline and all(
            not read_pid(rank_pid_path(self.job_dir, r)) for r in self.ranks
        ):
            what += "; no rank of this node has started (written its pid)"
            if self.nnodes > 1:
                what += ": torchrun's rendezvous may wait for the other nodes (see torchrun.log)"
        return self._report(now, what, behind, found, loading=True)

    def forensics(self, loading: bool) -> Explanation:
        """Every rank's dump and stack, asked for now (before anything is ended)."""
        t0 = time.monotonic()
        answers = forensics.collect(
            self.job_dir, self.ranks, wait_s=self.dump_wait_s, local=self.local
        )
        took = time.monotonic() - t0
        found = explain(answers, self.ranks, loading=loading, world=self.world)
        found.lines[0] += f" ({len(answers.dumps)} of {len(self.ranks)} answered in {took:.1f} s)"
        found.blamed = [r for r in found.blamed if r in self.ranks]
        return found

    def _report(
        self, now: float, what: str, behind: list[int], found: Explanation, loading: bool = False
    ) -> JobError:
        if found.headline:
            what += "; " + found.headline
        if len(behind) < len(self.ranks):
            who = " and ".join(self.name(r) for r in behind)
            if not found.headline:
                what += "; the other ranks waited in a collective"
        else:  # nothing tells them apart
            who, causes = f"every rank ({self.world})", "a stuck device"
            if len(self.ranks) < self.world:
                node = self.ranks[0] // self.nproc
                who = f"every rank of node {node} (ranks {self.ranks[0]}-{self.ranks[-1]})"
                causes += ", or a rank on another node"
            if not found.headline and not loading:
                what += "; none can be told from the others (a collective that never "
                what += f"completed, {causes})"
        err = job_error(FailureCode.RANK_HUNG, what, self.world, f"{who} failed: {what}")
        if len(behind) < len(self.ranks):
            first = behind[0]
            err.update(
                {"rank": first, "node": first // self.nproc, "local_rank": first % self.nproc}
            )
        err["traceback"] = "\n".join(self.where(now) + found.lines)
        return err

    def name(self, rank: int) -> str:
        """`rank 1/2 (node 0, local_rank 1)`, as every failure names a rank."""
        node, local = divmod(rank, self.nproc)
        return f"rank {rank}/{self.world} (node {node}, local_rank {local})"

    def where(self, now: float) -> list[str]:
        """One line per rank: its last mark and how long ago it changed (the report's detail)."""
        lines = [f"progress when the watchdog fired (timeout {self.timeout_s(False):.0f} s):"]
        for rank in self.ranks:
            mark = self.marks.get(rank)
            if mark is None:
                lines.append(f"  rank {rank}: no progress yet (loading)")
                continue
            ago = now - self.changed[rank]
            lines.append(f"  rank {rank}: step {mark.step} ({mark.phase}), {ago:.0f} s ago")
        return lines


def end_job(
    job_path: Path,
    child: subprocess.Popen[bytes],
    error: JobError,
    spec: Mapping[str, Any],
) -> int:
    """End every process of the hung job (veri_tui.jobfolder.contract.procs), append the failure
    report to the rank-0 log like any failure's; returns torchrun's exit code."""
    end_processes(job_path, child=child)
    append_report(Path(job_path).parent / LOG, error, plan_line_of(spec))
    return child.wait()
