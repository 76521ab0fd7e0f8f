"""When a multi-node job's platform failure is retried: the rule its watcher acts on and its
readers wait on.

A multi-node job's supervisors cannot retry it (each sees one node): its watcher
(watcher.py) restarts every node (restart.py) once the gathered record failed for the
platform with `max_restarts` left. A reader (target.py `settled`) waits past such an end
while the watcher runs. Both ask `retry_due`, kept here so the job target and the restart
import it without importing each other.
"""

from __future__ import annotations

from veri_tui.jobfolder.contract.attempts import attempts_of, max_restarts, retryable
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import Status
from veri_tui.launch.registry import RegistryEntry


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
