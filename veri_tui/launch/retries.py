"""When a multi-node job's platform failure is retried: the rule its watcher acts on and its
readers wait on.

A multi-node job's supervisors cannot retry it (each sees one node): its watcher
(watcher.py) restarts every node (restart.py) once the gathered record failed for the
platform with `max_restarts` left. A reader waits past such an end while the watcher runs
(`settled`). Both ask `retry_due`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from veri_tui.jobfolder.contract.attempts import attempts_of, max_restarts, retryable
from veri_tui.jobfolder.contract.procs import pid_alive
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import Status, has_ended
from veri_tui.launch import registry
from veri_tui.launch.loglines import wait_until_ended
from veri_tui.launch.registry import RegistryEntry

if TYPE_CHECKING:
    from veri_tui.launch.target import JobTarget


def retries_done(record: JobRecord) -> int:
    """Retries since the job's last start (launch or resume): the trailing `retry` attempts."""
    done = 0
    for attempt in reversed(attempts_of(record)):
        if not attempt.get("retry"):
            break
        done += 1
    return done


def retry_due(record: JobRecord, entry: RegistryEntry) -> bool:
    """The gathered record failed for the platform (RANK_LOST, COMM_ERROR, HARDWARE_ERROR,
    RANK_HUNG), every node has ended, and `max_restarts` leaves a restart; not again after
    a retry of this attempt was refused."""
    if record.get("status") != Status.FAILED or not retryable(record.get("error")):
        return False
    if entry.retry_refused and entry.retry_refused == str(len(attempts_of(record))):
        return False
    return retries_done(record) < max_restarts(record.get("spec") or {}, alone=False)


def settled(job: JobTarget, record: JobRecord) -> bool:
    """Ended, with no retry still to come (a multi-node job's watcher, while it runs,
    restarts a platform failure that `max_restarts` allows)."""
    if not has_ended(record):
        return False
    if job.entry is None or len(job.nodes) == 1:
        return True
    fresh = registry.load(job.job_id) or job.entry
    watching = fresh.watcher is not None and pid_alive(fresh.watcher)
    return not (watching and retry_due(record, fresh))


def wait_settled(job: JobTarget, read: Callable[[], JobRecord], poll_s: float) -> JobRecord:
    """Block until the job has ended with no retry to come (`settled`); its final record."""
    while True:
        record = wait_until_ended(read, poll_s)
        if settled(job, record):
            return record
        time.sleep(poll_s)
