"""What a Slurm job's supervisor records: its allocation, requeues and stops (job.json, log).

- `begin_allocation`, at every start of the batch script: job.json gets `slurm_job_id` and
  `slurm_restarts` ($SLURM_RESTART_COUNT). An attempt the previous allocation left open (it
  was killed before its supervisor recorded an outcome: `scontrol requeue` ends a job within
  KillWait seconds) is closed as PREEMPTED (platform), ending when its log was last written.
  When Slurm has requeued the job more often than `max_restarts` allows, the job fails
  naming the count, and nothing starts.
- `stop_outcome`, once the ranks ended after a stop request: the attempt's outcome, from the
  ranks' `stopped.json` (veri_tui/jobfolder/stopping.py). The time limit: failed, TIME_LIMIT
  (customer), resumable by hand. A preemption: PREEMPTED (platform), and the job goes back to
  `pending` (`record_requeued`) for Slurm to start again; that start resumes by itself from
  the newest verified checkpoint (supervise.begin_attempt).

Stdlib only, like the supervisor.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from veri_tui.jobfolder import attempts, failures
from veri_tui.jobfolder.atomic import modify_job, write_text_atomic
from veri_tui.jobfolder.layout import CANCEL_REQUEST, EXIT_CODE, JobLayout
from veri_tui.jobfolder.record import JobError, JobRecord, now_iso, read_job
from veri_tui.jobfolder.slurm import CANCEL, SlurmRun, node_log_dir, node_spec, slurm_job_keys
from veri_tui.jobfolder.status import FAILED, PENDING, RUNNING, SUCCEEDED, FailureCode, has_ended
from veri_tui.jobfolder.stopping import TIME_LIMIT, read_stopped, request_stop


def begin_allocation(job_path: Path, run: SlurmRun) -> bool:
    """Record this allocation; False when the job must not run (its requeues are spent, or
    it ended meanwhile: a cancel while it was pending), with that recorded."""
    job_dir = Path(job_path).parent
    lines: list[str] = []

    def change(record: JobRecord) -> None:
        if has_ended(record):
            return  # cancelled while pending: that outcome stands
        record.update(slurm_job_keys(run))  # type: ignore[typeddict-item]
        spec = record["spec"]
        opened = attempts.attempts_of(record)[-1:]
        if opened and opened[0].get("status") == RUNNING:
            msg = (
                f"attempt {opened[0].get('attempt')} ended without an outcome: Slurm ended "
                f"its allocation and requeued job {run.job_id} (restart {run.restarts})"
            )
            attempts.close_lost(record, job_dir, code=FailureCode.PREEMPTED, msg=msg)
            record.update({"status": PENDING, "ended_at": None})
            lines.append(msg)
        limit = attempts.max_restarts(spec, alone=False)
        if run.restarts > limit:
            times = "once" if run.restarts == 1 else f"{run.restarts} times"
            msg = (
                f"job failed: Slurm requeued job {run.job_id} {times}, more than max_restarts "
                f"{limit} allows; not started again (`veri-tui resume` continues from its "
                "newest verified checkpoint)"
            )
            err = failures.job_error(
                FailureCode.PREEMPTED, msg, int(spec.get("gpu_count") or 1), msg
            )
            record.update({"status": FAILED, "error": err, "ended_at": now_iso()})
            lines.append(msg)

    record = modify_job(job_path, change)
    if lines:
        failures.append_lines(JobLayout(job_dir).log, lines)
    if has_ended(record):
        if record.get("status") == FAILED:
            write_text_atomic(job_dir / EXIT_CODE, "1\n")
        return False
    return True


def stop_outcome(
    job_dir: Path, reason: str, signal_name: str, run: SlurmRun, world: int
) -> tuple[str, JobError]:
    """(status, error) of an attempt whose ranks were asked to stop (``reason``: the time
    limit, or a preemption) and have ended: FAILED with TIME_LIMIT, or PENDING (requeued)."""
    stopped = read_stopped(job_dir)
    if stopped is None:
        where = "its ranks ended before they could stop"
    elif stopped["checkpoint"]:
        where = f"stopped after step {stopped['step']}, checkpoint {stopped['checkpoint']}"
    else:
        where = f"stopped after step {stopped['step']}, before any checkpoint"
    if reason == TIME_LIMIT:
        msg = (
            f"the time limit of Slurm job {run.job_id} is near ({signal_name}): {where}; "
            "`veri-tui resume` continues from the newest verified checkpoint"
        )
        return FAILED, failures.job_error(FailureCode.TIME_LIMIT, msg, world)
    msg = (
        f"Slurm job {run.job_id} was preempted ({signal_name}): {where}; the requeued job "
        "resumes from the newest verified checkpoint"
    )
    return PENDING, failures.job_error(FailureCode.PREEMPTED, msg, world, f"job preempted: {msg}")


def record_requeued(job_path: Path, code: int, error: JobError) -> None:
    """Close the preempted attempt; the job is `pending` until Slurm starts it again."""

    def change(record: JobRecord) -> None:
        attempts.close_attempt(record, FAILED, error, code)
        record.update({"status": PENDING, "ended_at": None})

    modify_job(job_path, change)
    failures.append_lines(JobLayout(Path(job_path).parent).log, [str(error.get("summary"))])


class SlurmSupervision:
    """The supervisor's Slurm mode (veri_tui/jobfolder/supervise.py's Supervisor inherits it): the
    allocation's start, its signals, a stop's outcome, the requeue."""

    job_path: Path
    job_dir: Path
    layout: JobLayout[Path]
    cancel_requested: bool
    slurm: SlurmRun | None
    stop: tuple[str, bool, str] | None

    def begin_slurm(self) -> int | None:
        """Inside a Slurm allocation: record it, and count Slurm's requeues as restarts
        (None: the job must not run). 0 elsewhere."""
        self.slurm = SlurmRun.from_env(read_job(self.job_path)["spec"])
        if self.slurm is None:
            return 0
        return self.slurm.restarts if begin_allocation(self.job_path, self.slurm) else None

    def on_slurm_signal(self, signum: int) -> None:
        """A Slurm job's SIGTERM or SIGUSR1: a cancel, or ask the ranks to stop."""
        assert self.slurm is not None
        reason, requeue = self.slurm.classify(signum, self.job_dir)
        if reason == CANCEL:
            write_text_atomic(self.job_dir / CANCEL_REQUEST, "supervisor\n")  # ranks end at once
            self.cancel_requested = True
        elif self.stop is None:
            self.stop = (reason, requeue, signal.Signals(signum).name)
            request_stop(self.job_dir, reason, self.stop[2])
            failures.append_lines(self.layout.log, [f"stop: {self.stop[2]}: asked the ranks "
                                  f"to stop at their next step boundary ({reason})"])  # fmt: skip

    def ranks_stopped_themselves(self) -> None:
        """The ranks stopped with a checkpoint although this supervisor got no signal: a
        preemption's grace signal (and `scancel --signal=TERM JOB`) reaches the job's steps,
        torchrun and the ranks, not the batch shell. Read it as that SIGTERM."""
        assert self.slurm is not None
        reason, requeue = self.slurm.classify(signal.SIGTERM, self.job_dir)
        if reason == CANCEL:
            self.cancel_requested = True
            return
        self.stop = (reason, requeue, "SIGTERM")
        failures.append_lines(self.layout.log, [
            f"stop: the ranks got SIGTERM from Slurm, sent to the job's steps (not this batch "
            f"shell): {reason}"])  # fmt: skip

    def stopped(self, code: int, world: int) -> tuple[int, str, JobError | None]:
        """The outcome of an attempt asked to stop: succeeded if it finished first."""
        assert self.slurm is not None and self.stop is not None
        if code == 0 and read_stopped(self.job_dir) is None:
            return code, SUCCEEDED, None
        status, error = stop_outcome(self.job_dir, self.stop[0], self.stop[2], self.slurm, world)
        if status == FAILED:
            failures.append_lines(self.layout.log, [str(error["summary"])])
        return code, status, error

    def requeued(self, code: int, error: JobError) -> JobError | None:
        """Record the preempted attempt; requeue the job when Slurm will not. The job's
        failure when that requeue failed (nothing would start it again), else None."""
        assert self.slurm is not None and self.stop is not None
        record_requeued(self.job_path, code, error)
        failed = self.slurm.requeue() if self.stop[1] else None
        if failed is None:
            return None
        message = f"{error.get('message')}; but it could not be requeued: {failed}"
        return failures.job_error(FailureCode.PREEMPTED, message, error.get("world_size"))


def slurm_task(
    job_path: Path, endpoint: str, command: Callable[[Mapping[str, Any], Path], list[str]]
) -> NoReturn:
    """A Slurm job's srun task on node $SLURM_NODEID: `exec` that node's torchrun, the
    command line the supervisor's ``command(spec, log_dir)`` makes for the node's spec."""
    node = int(os.environ["SLURM_NODEID"])
    spec = node_spec(read_job(job_path)["spec"], endpoint, node, os.environ["SLURM_JOB_ID"])
    argv = command(spec, node_log_dir(Path(job_path).parent, node))
    os.execv(argv[0], argv)
