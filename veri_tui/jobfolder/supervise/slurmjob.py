"""A Slurm job's supervisor: its launcher, `SrunLauncher` (launcher.py's protocol: srun per
attempt, Slurm's signals, a stop's outcome, the requeue), and what it records of its
allocation, requeues and stops (job.json, log).

- `begin_allocation`, at every start of the batch script: job.json's `scheduler` gets the
  Slurm job id and its restarts ($SLURM_RESTART_COUNT). An attempt the previous allocation
  left open (it was killed before its supervisor recorded an outcome: `scontrol requeue`
  ends a job within KillWait seconds) is closed as PREEMPTED (platform), ending when its
  log was last written.
  When Slurm has requeued the job more often than `max_restarts` allows, the job fails
  naming the count, and nothing starts.
- `stop_outcome`, once the ranks ended after a stop request: the attempt's outcome, from the
  ranks' `stopped.json` (veri_tui/jobfolder/contract/stopping.py). The time limit: failed,
  TIME_LIMIT (customer), resumable by hand. A preemption: PREEMPTED (platform), and the job goes
  back to `pending` (`record_requeued`) for Slurm to start again; that start resumes by itself from
  the newest verified checkpoint (supervise.begin_attempt).

Stdlib only, like the supervisor.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from veri_tui.jobfolder.contract import attempts
from veri_tui.jobfolder.contract.atomic import modify_job, write_text_atomic
from veri_tui.jobfolder.contract.layout import CANCEL_REQUEST, EXIT_CODE, JobLayout
from veri_tui.jobfolder.contract.record import JobError, JobRecord, job_error, now_iso, read_job
from veri_tui.jobfolder.contract.status import (
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    FailureCode,
    has_ended,
)
from veri_tui.jobfolder.contract.stopping import TIME_LIMIT, read_stopped, request_stop
from veri_tui.jobfolder.failures import failures
from veri_tui.jobfolder.supervise.launcher import CANCEL as CANCEL_STOP
from veri_tui.jobfolder.supervise.srun_tasks import (
    CANCEL,
    SlurmRun,
    node_log_dir,
    node_logs,
    node_spec,
    scheduler_block,
)
from veri_tui.jobfolder.supervise.torchrun_cmd import rank_environment, torchrun_command


def begin_allocation(job_path: Path, run: SlurmRun) -> bool:
    """Record this allocation; False when the job must not run (its requeues are spent, or
    it ended meanwhile: a cancel while it was pending), with that recorded."""
    job_dir = Path(job_path).parent
    lines: list[str] = []

    def change(record: JobRecord) -> None:
        if has_ended(record):
            return  # cancelled while pending: that outcome stands
        record["scheduler"] = scheduler_block(run)
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
            err = job_error(FailureCode.PREEMPTED, msg, int(spec.get("gpu_count") or 1), msg)
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
        return FAILED, job_error(FailureCode.TIME_LIMIT, msg, world)
    msg = (
        f"Slurm job {run.job_id} was preempted ({signal_name}): {where}; the requeued job "
        "resumes from the newest verified checkpoint"
    )
    return PENDING, job_error(FailureCode.PREEMPTED, msg, world, f"job preempted: {msg}")


def record_requeued(job_path: Path, code: int, error: JobError) -> None:
    """Close the preempted attempt; the job is `pending` until Slurm starts it again."""

    def change(record: JobRecord) -> None:
        attempts.close_attempt(record, FAILED, error, code)
        record.update({"status": PENDING, "ended_at": None})

    modify_job(job_path, change)
    failures.append_lines(JobLayout(Path(job_path).parent).log, [str(error.get("summary"))])


class SrunLauncher:
    """The supervisor's launcher inside a Slurm allocation (launcher.py's protocol): the
    allocation recorded at its start, srun per attempt, Slurm's signals read in the wait
    loop, a stop's outcome, the requeue."""

    read_signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)  # `--signal=B:USR1@120`
    sees_every_node = True  # one folder for every node: this supervisor sees all ranks

    def __init__(self) -> None:
        self.run: SlurmRun | None = None
        self.stop: tuple[str, bool, str] | None = None  # (reason, requeue it, signal name)

    def _run(self) -> SlurmRun:
        assert self.run is not None, "begin() reads the allocation first"
        return self.run

    def begin(self, job_path: Path) -> int | None:
        """Record the allocation, and count Slurm's requeues as restarts (None: the job
        must not run)."""
        self.run = SlurmRun.from_env(read_job(job_path)["spec"])
        if self.run is None:
            raise RuntimeError("srun runs a Slurm job's spec inside its allocation only")
        return self.run.restarts if begin_allocation(job_path, self.run) else None

    def command(self, spec: Mapping[str, Any], job_path: Path, log_dir: Path) -> list[str]:
        return self._run().command(spec, job_path)

    def environment(self) -> dict[str, str]:
        return SlurmRun.environment(rank_environment(os.environ))

    def node_logs(self, job_dir: Path) -> list[tuple[int, Path, Path]] | None:
        return node_logs(job_dir, self._run().nnodes)

    def heard(self, signum: int, log: Path) -> None:
        # Said at once: the ranks got the signal too, and the line they log once they
        # stopped must not come before its cause (the meaning follows).
        job = self.run.job_id if self.run is not None else os.environ.get("SLURM_JOB_ID")
        failures.append_lines(log, [f"signal: {signal.Signals(signum).name} from Slurm "
                                    f"(job {job}); reading what it means"])  # fmt: skip

    def on_signal(self, signum: int, job_dir: Path, log: Path) -> bool:
        """A Slurm job's SIGTERM or SIGUSR1: a cancel (True), or ask the ranks to stop."""
        reason, requeue = self._run().classify(signum, job_dir)
        if reason == CANCEL:
            write_text_atomic(job_dir / CANCEL_REQUEST, "supervisor\n")  # ranks end at once
            return True
        if self.stop is None:
            self.stop = (reason, requeue, signal.Signals(signum).name)
            request_stop(job_dir, reason, self.stop[2])
            failures.append_lines(log, [f"stop: {self.stop[2]}: asked the ranks to stop at "
                                        f"their next step boundary ({reason})"])  # fmt: skip
        return False

    def stopped(self, code: int, world: int, job_dir: Path, log: Path
                ) -> tuple[str, JobError | None] | str | None:  # fmt: skip
        """The outcome of an attempt asked to stop: succeeded if it finished first. The ranks
        may have stopped with a checkpoint although this supervisor got no signal: a
        preemption's grace signal (and `scancel --signal=TERM JOB`) reaches the job's steps,
        torchrun and the ranks, not the batch shell; that is read as its SIGTERM."""
        if self.stop is None and read_stopped(job_dir) is not None:
            reason, requeue = self._run().classify(signal.SIGTERM, job_dir)
            if reason == CANCEL:
                return CANCEL_STOP
            self.stop = (reason, requeue, "SIGTERM")
            failures.append_lines(log, [
                f"stop: the ranks got SIGTERM from Slurm, sent to the job's steps (not this "
                f"batch shell): {reason}"])  # fmt: skip
        if self.stop is None:
            return None
        if code == 0 and read_stopped(job_dir) is None:
            return SUCCEEDED, None
        status, error = stop_outcome(job_dir, self.stop[0], self.stop[2], self._run(), world)
        if status == FAILED:
            failures.append_lines(log, [str(error["summary"])])
        return status, error

    def requeued(self, job_path: Path, code: int, error: JobError) -> JobError | None:
        """Record the preempted attempt; requeue the job when Slurm will not. The job's
        failure when that requeue failed (nothing would start it again), else None."""
        record_requeued(job_path, code, error)
        failed = self._run().requeue() if self.stop is not None and self.stop[1] else None
        if failed is None:
            return None
        message = f"{error.get('message')}; but it could not be requeued: {failed}"
        return job_error(FailureCode.PREEMPTED, message, error.get("world_size"))

    def cancelled(self) -> int | None:
        """Slurm's accounting says cancelled too (the job scancels itself)."""
        return self._run().end_cancelled()


def slurm_task(job_path: Path, endpoint: str) -> NoReturn:
    """A Slurm job's srun task on node $SLURM_NODEID: `exec` that node's torchrun, for the
    node's spec, its logs in `elastic/node<k>/`."""
    node = int(os.environ["SLURM_NODEID"])
    spec = node_spec(read_job(job_path)["spec"], endpoint, node, os.environ["SLURM_JOB_ID"])
    argv = torchrun_command(spec, job_path, node_log_dir(Path(job_path).parent, node))
    os.execv(argv[0], argv)
