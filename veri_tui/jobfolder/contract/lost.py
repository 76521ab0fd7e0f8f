"""The one "lost" rule: a job whose supervisor vanished without recording an outcome.

"lost" is never written to job.json: the file stays as the supervisor last wrote it. A
reader that finds `pending` or `running` judges it with `judge`, on the host that holds
the folder (the supervisor's pid means something only there):

- its supervisor's pid is known (its pid file, or the pid a launcher saw when it started
  it) and that process is alive: the job runs;
- the pid is known and the process is gone: the record is read once more (the supervisor
  may have finished between the two reads) and, still unended and unchanged, the job is
  lost; a record that changed between the reads was written by a live supervisor (a new
  attempt's, whose pid the reader did not know yet), so it is reported as read again;
- no pid is known: the job is lost once `START_TIMEOUT_S` have passed since it was created
  or resumed (until then its supervisor may not have written its pid yet).

A lost job is reported `failed`, `lost: true`, error `RANK_LOST` naming why (`lost_record`).

A scheduler may know the outcome its supervisor never wrote (a Slurm job scancelled or out
of time before its supervisor could record it): a reader shows it as `closed` would record
it, and the one who keeps what a read saw records it with `close_job` (`python -m veri_tui.jobfolder
close`, under the job lock; veri_tui/launch/settle.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from veri_tui.jobfolder.contract.atomic import job_lock, write_json_atomic
from veri_tui.jobfolder.contract.attempts import close_attempt
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.jobfolder.contract.procs import pid_alive, read_pid
from veri_tui.jobfolder.contract.record import (
    JobError,
    JobRecord,
    epoch_of,
    job_error,
    now_iso,
    read_job,
)
from veri_tui.jobfolder.contract.status import CANCELLED, FAILED, FailureCode, has_ended

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
    if has_ended(again) or _moved(record, again):
        return again
    gone = f"on {where} is gone" if where else f"(pid {pid}) is gone without recording an outcome"
    return lost_record(again, f"its supervisor {gone}")


def _moved(first: JobRecord, again: JobRecord) -> bool:
    """The record changed between the two reads (another status, another attempt): a live
    supervisor wrote it, not the one ``pid`` named. A reader holding an older pid (a
    multi-node job restarted meanwhile: its new supervisor began an attempt) must not call
    the job lost."""

    def mark(rec: JobRecord) -> tuple[object, int, object]:
        return rec.get("status"), len(rec.get("attempts") or []), rec.get("resumed_at")

    return mark(first) != mark(again)


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


def closed(record: JobRecord, status: str, error: JobError | None) -> JobRecord:
    """A copy of the record with the outcome ``status`` recorded as the job's host would
    record it (`close_job`): a cancel marks it `cancelled`, anything else closes the latest
    attempt. An ended record comes back as it is: an outcome is never rewritten."""
    view = cast(JobRecord, json.loads(json.dumps(record)))
    if has_ended(view):
        return view
    if status == CANCELLED:
        view.update({"status": CANCELLED, "ended_at": now_iso()})
    else:
        close_attempt(view, status, error, None)
    return view


def close_job(path: Path, status: str, error: JobError | None) -> JobRecord:
    """Record an outcome the job's scheduler reported (a Slurm job that ended without its
    supervisor writing one), under the job lock; an outcome already written stays."""
    with job_lock(path):
        record = read_job(path)
        if has_ended(record):
            return record  # nothing to record: the file stays as it is
        record = closed(record, status, error)
        write_json_atomic(path, record)
    return record
