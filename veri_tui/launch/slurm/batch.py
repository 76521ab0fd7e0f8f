"""A Slurm job's supervisor, the batch job: submitted, judged and cancelled from its login
node (`SlurmHost`, host.py). The `slurm` backend's operations (backends/slurm.py) are these:

- `submit`: writes `<job_dir>/sbatch.sh` (script.py) and runs `sbatch --parsable`; the
  handle is the Slurm job id, also in job.json (`scheduler`, as the supervisor writes it).
  Anything that fails after sbatch answered scancels the job;
- `alive`, `judge`: the controller's state (states.py) instead of a pid;
- `cancel`: the `cancel.request` marker, `scancel --signal=TERM --full`, `scancel` after the
  grace, then `cancelled` recorded if nothing did.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable
from typing import cast

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import CANCEL_REQUEST, JOB_FILE
from veri_tui.jobfolder.contract.lost import closed, lost_record
from veri_tui.jobfolder.contract.lost import judge as judge_pid
from veri_tui.jobfolder.contract.record import JobRecord, scheduler_of
from veri_tui.jobfolder.contract.status import CANCELLED, PENDING, has_ended
from veri_tui.launch.host import jobfolder_argv
from veri_tui.launch.slurm.host import SlurmHost
from veri_tui.launch.slurm.script import SCRIPT
from veri_tui.launch.slurm.states import SlurmState, outcome, query

#: How long a scancel'd job may take to leave the queue (Slurm's KillWait, then cleanup).
LEAVE_S = 60.0


def submit(host: SlurmHost, job_dir: str) -> str:
    """Write sbatch.sh, submit it; the Slurm job id (also in job.json). A cancel marker left
    by an earlier cancel goes first: this attempt's SIGTERM is a preemption."""
    login = host.machine
    record = json.loads(login.read_bytes(posixpath.join(job_dir, JOB_FILE), 1 << 24))
    script = posixpath.join(job_dir, SCRIPT)
    login.write_atomic(script, host.batch_script(job_dir, record).encode())
    marker = posixpath.join(job_dir, CANCEL_REQUEST)
    if login.exists(marker):
        login.remove(marker)
    res = host.slurm(["sbatch", "--parsable", f"--chdir={job_dir}", script])
    job_id = res.text.strip().split(";")[0]
    if not job_id.isdigit():
        raise VeriError(f"sbatch on {login.where} refused the job: {res.error_line()}", key="slurm")
    try:
        _set_scheduler(host, job_dir, job_id)
    except BaseException:
        host.slurm(["scancel", job_id])  # no half-started job stays queued
        raise
    return job_id


def _jobfolder(host: SlurmHost, job_dir: str, command: str, *args: str) -> None:
    """`python -m veri_tui.jobfolder COMMAND JOB_JSON ARGS` on the login node: job.json changed
    under its lock by the job's own package."""
    job = posixpath.join(job_dir, JOB_FILE)
    res = host.machine.run(jobfolder_argv(host, job_dir, command, job, *args), timeout=60)
    if res.exit_status != 0:
        raise VeriError(f"job.json on {host.login.where}: {res.error_line()}", key="job")


def _set_scheduler(host: SlurmHost, job_dir: str, job_id: str) -> None:
    """job.json's `scheduler` id. A folder made by an earlier release (resumed now) runs its
    own package there, whose command was `set-slurm-id`."""
    try:
        _jobfolder(host, job_dir, "set-scheduler", "slurm", job_id)
    except VeriError as exc:
        if "invalid choice: 'set-scheduler'" not in str(exc):
            raise
        _jobfolder(host, job_dir, "set-slurm-id", job_id)


def alive(host: SlurmHost, job_id: str) -> bool:
    """Whether the controller has the batch job queued or running."""
    state = query(host.slurm, job_id)
    return state is not None and state.alive


def judge(host: SlurmHost, record: JobRecord, job_id: str | None,
          reread: Callable[[], JobRecord]) -> JobRecord:  # fmt: skip
    """The record as the controller explains it: queued or running (with the Slurm state and
    reason), else the outcome its end state means, else lost. A read writes nothing: the
    reader's `settle()` records that outcome in job.json (the controller forgets an ended
    job after MinJobAge; without accounting nothing else would remember why it ended)."""
    if has_ended(record):
        return record
    if job_id is None:  # not submitted yet (or its submission failed): the lost rule's
        return judge_pid(record, None, lambda _: False, reread, where=host.machine.name)
    state = query(host.slurm, job_id)
    if state is not None and state.alive:
        return with_state(record, state)
    again = reread()  # the supervisor may have recorded its end meanwhile
    if has_ended(again):
        return again
    if state is None:
        return lost_record(again, f"its Slurm job {job_id} is unknown to the controller")
    mapped = outcome(state, (again.get("spec") or {}).get("gpu_count"))
    if mapped is None:
        why = f"its Slurm job {job_id} ended {state.state} without recording an outcome"
        return with_state(lost_record(again, why), state)
    # Shown now, recorded by the reader's settle() (`python -m veri_tui.jobfolder close`, locked).
    return with_state(closed(again, *mapped), state)


def cancel(host: SlurmHost, job_dir: str, job_id: str | None, grace: float) -> None:
    """Mark the cancel, signal the batch job (its supervisor ends the ranks and records
    `cancelled`), scancel it after ``grace``, wait until it left; record `cancelled` if
    nothing did."""
    host.machine.write_atomic(posixpath.join(job_dir, CANCEL_REQUEST), b"cancel\n")
    state = query(host.slurm, job_id) if job_id is not None else None
    if job_id is not None and state is not None and state.alive:
        if state.status == PENDING:  # nothing runs yet: a pending job takes no signal
            host.slurm(["scancel", job_id])
        else:
            host.slurm(["scancel", "--signal=TERM", "--full", job_id])
            if not _left(host, job_id, grace + 3.0):
                host.slurm(["scancel", job_id])
        if not _left(host, job_id, LEAVE_S):
            raise VeriError(
                f"Slurm job {job_id} did not end within {LEAVE_S:.0f} s of scancel; see squeue",
                key="job",
            )
    _jobfolder(host, job_dir, "close", "--status", CANCELLED)


def _left(host: SlurmHost, job_id: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(host, job_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def with_state(record: JobRecord, state: SlurmState) -> JobRecord:
    """The record with what the controller says in its `scheduler` block (`state`,
    `reason`: read-side keys like `lost`, never written to job.json)."""
    view = cast(JobRecord, dict(record))
    view["scheduler"] = {**(scheduler_of(record) or {}), "name": "slurm", "id": state.job_id,
                         "state": state.state, "reason": state.reason}  # fmt: skip
    return view
