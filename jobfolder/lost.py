"""The one "lost" rule: a job whose supervisor vanished without recording an outcome.

"lost" is never written to job.json: the file stays as the supervisor last wrote it. A
reader that finds `pending` or `running` judges it with `judge`, on the host that holds
the folder (the supervisor's pid means something only there):

- its supervisor's pid is known (its pid file, or the pid a launcher saw when it started
  it) and that process is alive: the job runs;
- the pid is known and the process is gone: the record is read once more (the supervisor
  may have finished between the two reads) and, still unended, the job is lost;
- no pid is known: the job is lost once `START_TIMEOUT_S` have passed since it was created
  or resumed (until then its supervisor may not have written its pid yet).

A lost job is reported `failed`, `lost: true`, error `RANK_LOST` naming why (`lost_record`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from jobfolder.failures import job_error
from jobfolder.layout import JobLayout
from jobfolder.procs import pid_alive, read_pid
from jobfolder.record import JobError, JobRecord, epoch_of, read_job
from jobfolder.status import FAILED, FailureCode, has_ended

#: A pending job whose supervisor never wrote its pid within this long is lost.
START_TIMEOUT_S = 60.0


def judge(
    record: JobRecord,
    pid: int | None,
    alive: Callable[[int], bool],
    reread: Callable[[], JobRecord],
    where: str = "",
    now: float | None = None,
) -> JobRecord:
    """``record`` as a reader reports it: itself, the re-read record, or a lost record.
    ``pid``: the supervisor's, None when unknown; ``alive(pid)`` asks the folder's host;
    ``where``: the host, for a folder on another machine (said in the reason)."""
    if has_ended(record):
        return record
    if pid is None:
        # A resumed job waits for its new supervisor from the resume on, not from creation.
        since = epoch_of(record.get("resumed_at") or record.get("created_at"))
        now = time.time() if now is None else now
        if since is None or now - since < START_TIMEOUT_S:
            return record  # just launched: the supervisor has not written its pid yet
        return lost_record(record, f"its supervisor{' on ' + where if where else ''} never started")
    if alive(pid):
        return record
    again = reread()  # the supervisor may have finished between the two reads
    if has_ended(again):
        return again
    gone = f"on {where} is gone" if where else f"(pid {pid}) is gone without recording an outcome"
    return lost_record(again, f"its supervisor {gone}")


def lost_record(record: JobRecord, why: str) -> JobRecord:
    """The record of a job whose supervisor vanished without recording an outcome: failed,
    ``lost: true``, error RANK_LOST saying ``why``."""
    msg = f"job lost: {why} (machine restarted or process killed)"
    world = (record.get("spec") or {}).get("gpu_count")
    error: JobError = job_error(FailureCode.RANK_LOST, msg, world, summary=msg)
    lost: JobRecord = {**record, "status": FAILED, "lost": True, "error": error}
    return lost


def read_status(job_path: Path, fallback_pid: int | None = None) -> JobRecord:
    """job.json at ``job_path`` with the lost rule applied here, on the folder's own host;
    ``fallback_pid``: the supervisor pid its launcher saw, for a pid file not written yet.
    Raises OSError when job.json is missing, ValueError when it is unreadable."""
    sup = read_pid(JobLayout(job_path.parent).supervisor_pid)
    record = read_job(job_path)
    return judge(record, sup or fallback_pid, pid_alive, lambda: read_job(job_path))
