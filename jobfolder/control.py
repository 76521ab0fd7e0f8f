"""What a job's host does when asked: report its status, cancel it, prepare its resume.

The launcher runs these where the job folder is, through `python -m jobfolder` (this
machine's Python for a local job, the host's over SSH: jobfolder/__main__.py), so the pids
they judge and signal are the host's own:

- `status`: job.json with the lost rule (jobfolder/lost.py);
- `cancel`: the supervisor is asked first (SIGTERM: it ends torchrun and every rank and
  records `cancelled`); when it is gone, or does not finish in time, the job's processes
  are ended here (SIGTERM, SIGKILL after the grace) and the cancel recorded;
- `resume`: the job made `pending` for a new attempt (attempts.prepare_resume); the
  launcher then starts its supervisor.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from jobfolder.atomic import record_cancel
from jobfolder.layout import JobLayout
from jobfolder.lost import read_status
from jobfolder.procs import GRACE_S, end_processes, job_processes, pid_alive, read_pid
from jobfolder.record import JobRecord
from jobfolder.status import has_ended, is_lost, outcome_recorded

#: How long past the grace a cancelled supervisor gets to record its own outcome.
SUPERVISOR_SLACK_S = 3.0


def cancel_job(
    job_path: Path, grace: float = GRACE_S, fallback_pid: int | None = None
) -> JobRecord:
    """End every process of the job (SIGTERM, SIGKILL after ``grace``); status cancelled,
    unless it had already ended. ``fallback_pid``: the supervisor pid its launcher saw."""
    record = read_status(job_path, fallback_pid)
    if has_ended(record) and not (is_lost(record) and job_processes(job_path)):
        return record  # ended already (a lost job is swept only while ranks survive it)
    sup = read_pid(JobLayout(job_path.parent).supervisor_pid) or fallback_pid
    if sup and pid_alive(sup):
        os.kill(sup, signal.SIGTERM)
        deadline = time.monotonic() + grace + SUPERVISOR_SLACK_S
        while time.monotonic() < deadline and pid_alive(sup):
            time.sleep(0.1)
    record = read_status(job_path, fallback_pid)
    if outcome_recorded(record) and not job_processes(job_path):
        return record
    if sup and pid_alive(sup):
        os.kill(sup, signal.SIGKILL)
    end_processes(job_path, grace=min(grace, 2.0))
    return record_cancel(job_path)
