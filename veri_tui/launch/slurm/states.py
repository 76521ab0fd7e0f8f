"""A Slurm job's state, and what it means for the job record (docs/slurm.md, States).

`query` asks the controller: `squeue -h -j ID -o %T|%r` while it holds the job (pending,
running, and ended jobs for MinJobAge), else `scontrol show job ID -o`, else `sacct` (when
the cluster keeps accounting; the test cluster does not). A controller that does not answer
is a VeriError (the job is not judged lost for it). `outcome` maps an ended state to
the status, failure code and attribution job.json would have had:

    PENDING (+ reason) -> pending; RUNNING, CONFIGURING, COMPLETING -> running
    TIMEOUT, DEADLINE -> failed TIME_LIMIT (customer); OUT_OF_MEMORY -> failed HOST_OOM (customer)
    PREEMPTED -> failed PREEMPTED (platform); NODE_FAIL, BOOT_FAIL -> failed HARDWARE_ERROR
    (platform); CANCELLED -> cancelled; FAILED, COMPLETED without an outcome -> lost

A job whose supervisor recorded its outcome keeps it: these apply only where job.json has
none (the supervisor was killed with the allocation).
"""

from __future__ import annotations

from dataclasses import dataclass

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.record import JobError, job_error
from veri_tui.jobfolder.contract.status import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    FailureCode,
    Status,
)
from veri_tui.launch.slurm.partition import Run, fields

#: Slurm job states by what they are for the job record (squeue(1), JOB STATE CODES).
WAITING = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
)
ACTIVE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"})

# An ended state -> (code, why) of the failure it is; CANCELLED and the lost ones apart.
_FAILURES = {
    "TIMEOUT": (FailureCode.TIME_LIMIT, "the job's time limit ran out (Slurm TIMEOUT)"),
    "DEADLINE": (FailureCode.TIME_LIMIT, "the job's deadline passed (Slurm DEADLINE)"),
    "OUT_OF_MEMORY": (
        FailureCode.HOST_OOM,
        "a node ran out of the memory the job was given (Slurm OUT_OF_MEMORY)",
    ),
    # The job side's code (platform; Slurm requeues it, the supervisor does not retry it).
    "PREEMPTED": (FailureCode.PREEMPTED, "Slurm preempted the job (PREEMPTED)"),
    "NODE_FAIL": (FailureCode.HARDWARE_ERROR, "a node of the allocation failed (Slurm NODE_FAIL)"),
    "BOOT_FAIL": (
        FailureCode.HARDWARE_ERROR,
        "a node of the allocation failed to boot (Slurm BOOT_FAIL)",
    ),
}


@dataclass(frozen=True)
class SlurmState:
    """What the controller says of one job: its state (`PENDING`, ...) and reason."""

    job_id: str
    state: str
    reason: str = ""

    @property
    def status(self) -> Status | None:
        """pending or running while the job is queued or runs; None once it has ended."""
        if self.state in WAITING:
            return PENDING
        return RUNNING if self.state in ACTIVE else None

    @property
    def alive(self) -> bool:
        return self.status is not None


def _clean(reason: str) -> str:
    return "" if reason in ("None", "(null)", "n/a") else reason


def query(run: Run, job_id: str) -> SlurmState | None:
    """The job's state as the controller (or accounting) knows it; None when none does."""
    res = run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r"])
    if res.exit_status != 0 and b"Invalid job id" not in res.stderr:
        # The controller did not answer: nothing can be said of the job (it is not lost).
        raise VeriError(f"squeue failed: {res.error_line()}", key="slurm")
    line = res.text.strip().splitlines()[0] if res.exit_status == 0 and res.text.strip() else ""
    if line:
        state, _, reason = line.partition("|")
        return SlurmState(job_id, state.split()[0], _clean(reason))
    res = run(["scontrol", "show", "job", job_id, "-o"])
    if res.exit_status == 0 and res.text.strip():
        got = fields(res.text.splitlines()[0])
        if got.get("JobState"):
            return SlurmState(job_id, got["JobState"], _clean(got.get("Reason", "")))
    res = run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,Reason"])
    line = res.text.strip().splitlines()[0] if res.exit_status == 0 and res.text.strip() else ""
    if line:  # `CANCELLED by 0|None`
        state, _, reason = line.partition("|")
        return SlurmState(job_id, state.split()[0], _clean(reason))
    return None


def outcome(state: SlurmState, world: int | None) -> tuple[str, JobError | None] | None:
    """(status, error) of a job that ended in ``state`` without recording its outcome;
    None where the state says nothing about why (FAILED, COMPLETED: the lost rule's)."""
    if state.state == "CANCELLED":
        return CANCELLED, None
    if state.state not in _FAILURES:
        return None
    code, why = _FAILURES[state.state]
    msg = f"Slurm job {state.job_id}: {why}" + (f" ({state.reason})" if state.reason else "")
    return FAILED, job_error(code, msg, world, summary=msg)
