"""Statuses, failure codes and their attribution: the words job.json uses, each spelled once.

- `Status`: the values of job.json's `status`, in the order a job passes through them; `ENDED`
  are the outcomes, after which the status changes no more. "lost" is not a stored status: a
  reader that finds `pending`/`running` with the supervisor gone reports the job `failed`
  with `lost: true` (veri_tui/jobfolder/contract/lost.py).
- `FailureCode`: `error.code` (contracts section 6), each with its `Attribution`
  (`error.attribution`): the customer's, the platform's (credited back, retried under
  `max_restarts`) or pending (not known yet).

Both are `StrEnum`s: a member equals its string, so records read from JSON compare with
them directly and `json.dumps` writes the plain word.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


class Status(StrEnum):
    """job.json's `status`."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


PENDING, RUNNING = Status.PENDING, Status.RUNNING
SUCCEEDED, FAILED, CANCELLED = Status.SUCCEEDED, Status.FAILED, Status.CANCELLED
#: Every value job.json's `status` takes, in the order a job passes through them.
STATUSES = tuple(Status)
#: The outcomes: a job with one of these has ended and its status changes no more.
ENDED = (SUCCEEDED, FAILED, CANCELLED)


class Attribution(StrEnum):
    """`error.attribution`: whose failure it is."""

    CUSTOMER = "customer"
    PLATFORM = "platform"
    PENDING = "pending"


class FailureCode(StrEnum):
    """`error.code`; `attribution` says whose it is."""

    CUDA_OOM = "CUDA_OOM"
    DATA_ERROR = "DATA_ERROR"
    CONFIG_ERROR = "CONFIG_ERROR"
    MODEL_LOAD_ERROR = "MODEL_LOAD_ERROR"
    RANK_LOST = "RANK_LOST"
    # no rank advanced for hang_timeout_s (veri_tui/jobfolder/supervise/watchdog.py)
    RANK_HUNG = "RANK_HUNG"
    COMM_ERROR = "COMM_ERROR"
    HARDWARE_ERROR = "HARDWARE_ERROR"
    PREEMPTED = "PREEMPTED"  # the scheduler took the nodes back (a Slurm preemption, requeue)
    TIME_LIMIT = "TIME_LIMIT"  # the job's time limit (Slurm --time) ended it
    HOST_OOM = "HOST_OOM"  # the host's memory limit ended it (Slurm OUT_OF_MEMORY)
    UNKNOWN = "UNKNOWN"

    @property
    def attribution(self) -> Attribution:
        """Whose failure a failure with this code is."""
        return ATTRIBUTION[self.value]


# The time limit and the host memory are what the customer asked the scheduler for.
_CUSTOMER = ("CUDA_OOM", "DATA_ERROR", "CONFIG_ERROR", "MODEL_LOAD_ERROR", "TIME_LIMIT", "HOST_OOM")
_PLATFORM = ("RANK_LOST", "RANK_HUNG", "COMM_ERROR", "HARDWARE_ERROR")
#: error.code -> error.attribution (a code missing here is not a failure code).
ATTRIBUTION: dict[str, Attribution] = {
    **dict.fromkeys(_CUSTOMER, Attribution.CUSTOMER),
    **dict.fromkeys(_PLATFORM, Attribution.PLATFORM),
    # The platform's too (credited back), but no supervisor retries it in place: Slurm
    # requeues the job, and the requeued job resumes (max_restarts counts the requeues).
    "PREEMPTED": Attribution.PLATFORM,
    "UNKNOWN": Attribution.PENDING,
}
#: Failures retried under `max_restarts`: the platform's, never the customer's nor UNKNOWN.
RETRY_CODES = tuple(FailureCode(c) for c in _PLATFORM)


def attribution_of(code: object) -> Attribution:
    """The attribution of ``code``; an unknown code is pending (nobody knows yet)."""
    return ATTRIBUTION.get(str(code), Attribution.PENDING)


def has_ended(job: Mapping[str, object] | str | None) -> bool:
    """True when the status (or a record's status) is an outcome. A lost job has ended too:
    readers report it `failed`; `outcome_recorded` tells it from a recorded one."""
    status = job.get("status") if isinstance(job, Mapping) else job
    return status in ENDED


def is_lost(record: Mapping[str, object]) -> bool:
    """True for a record a reader marked lost (its supervisor vanished without an outcome)."""
    return bool(record.get("lost"))


def outcome_recorded(record: Mapping[str, object]) -> bool:
    """True when the job's own supervisor (or a cancel) wrote its outcome: ended, not lost."""
    return has_ended(record) and not is_lost(record)
