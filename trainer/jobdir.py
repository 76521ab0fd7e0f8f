"""The job folder: the job record (job.json), its statuses, and the one way files are written.

Everything that reads or writes a job folder agrees through this module (docs/interfaces.md
section 2): the supervisor (trainer/supervise.py), the launchers, cancel and the app. Finding
and ending a job's processes, and its pid files, are in trainer/procs.py.

- Statuses: a job.json `status` is one of `STATUSES`; `ENDED` are the outcomes. "lost" is not
  a stored status: a reader that finds `pending`/`running` with the supervisor gone reports
  the job `failed` with `lost: true` (veri_tui.launch.records); `is_lost` reads that mark.
- Writes: `write_*_atomic` is the one atomic writer (tmp file beside the target, fsync,
  os.replace, fsync of the folder): no reader sees a half-written file, and a crash leaves
  the old or the new file. Every read-modify-write of job.json goes through `modify_job`,
  under an exclusive flock on the sidecar `job.json.lock`, so concurrent writers (the
  supervisor, cancel, resume) never lose each other's updates.

Four things are called a record in this project; each has one name:
- the plan record, `veri_tui.plan.PlanRecord`: what `veri-tui plan` decides;
- the job record, `JobRecord`: job.json;
- a rank failure, `RankFailure`: `failures/rank-<r>.json`, written by a failing rank;
- a registry entry, `veri_tui.launch.ssh.registry.RegistryEntry`: a remote job known here.

Stdlib only and Python 3.8-clean: uploaded with the trainer to GPU hosts, where the
supervisor imports it; the planning core imports it too (for `PIN_KEYS`), so it stays cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict

PENDING, RUNNING = "pending", "running"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
#: Every value job.json's `status` takes, in the order a job passes through them.
STATUSES = (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED)
#: The outcomes: a job with one of these has ended and its status changes no more.
ENDED = (SUCCEEDED, FAILED, CANCELLED)

#: The knobs of `resolved_parallelism` that pin the plan: copied into hyperparameters they
#: make `plan` decide the same again, and the trainer takes them from the plan the user saw.
PIN_KEYS = (
    "data_parallel_size",
    "zero_stage",
    "micro_batch_size",
    "gradient_accumulation_steps",
    "global_batch_size",
    "precision",
    "gradient_checkpointing",
    "cpu_offload",
)

JOB_FILE = "job.json"


class JobError(TypedDict, total=False):
    """A failed job's `error`: who failed, why, and whose fault (docs/jobs.md)."""

    code: str
    attribution: str
    message: str
    rank: int | None
    node: int | None
    local_rank: int | None
    world_size: int | None
    traceback: str
    summary: str


class JobSpec(TypedDict, total=False):
    """What the trainer runs: job.json's `spec`, built by veri_tui.launch.spec.make_record."""

    method: str
    model: str
    model_path: str
    dataset: str
    output_dir: str
    gpu: str
    gpu_count: int
    nproc_per_node: int
    device: str
    hyperparameters: dict[str, Any]
    resolved_parallelism: dict[str, Any]
    plan_header: list[str]
    states_bytes_per_gpu: int | None
    step_time_s: float | None  # the plan's predicted step time (the hang watchdog's)
    resume_from: str | None


class Attempt(TypedDict, total=False):
    """One run of the job's torchrun: an entry of job.json's `attempts` (trainer/attempts.py).
    `started_s` is the start in epoch seconds and `wall_s` its length (the credit's clock)."""

    attempt: int
    started_at: str | None
    ended_at: str | None
    status: str
    error: JobError | None
    resumed_from_step: int | None
    gpu_count: int
    started_s: float
    wall_s: float
    retry: bool  # started by a multi-node launcher after a platform failure


class JobRecord(TypedDict, total=False):
    """The job record: job.json. `lost` and `stale` are only ever set by readers. The
    top-level status, error, started_at, ended_at and exit_code are the latest attempt's."""

    job_id: str
    status: str
    created_at: str
    started_at: str | None
    ended_at: str | None
    host: str | None
    spec: JobSpec
    resolved_parallelism: dict[str, Any]
    error: JobError | None
    exit_code: int
    preflight: list[str]
    predicted: dict[str, Any]  # the plan's figures (veri_tui/launch/measured.py predicted_of)
    measured: dict[str, Any] | None  # the ranks' measurements (trainer/jobstats.py)
    attempts: list[Attempt]
    credited_gpu_s: float
    resumed_at: str | None
    resume_choice: dict[str, Any] | None  # a multi-node resume's step, for its next attempt
    lost: bool
    stale: bool


class RankFailure(TypedDict, total=False):
    """A rank failure: `failures/rank-<r>.json`, what a rank writes as it fails."""

    rank: int
    local_rank: int
    node: int
    world_size: int
    time_ns: int
    type: str
    code: str
    message: str
    peer_failure: bool
    traceback: str


def now_iso() -> str:
    """UTC time as ISO-8601 with seconds, the form job.json uses."""
    # timezone.utc, not datetime.UTC: the GPU machine's Python may be older than 3.11.
    return datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017


def has_ended(job: JobRecord | dict[str, Any] | str | None) -> bool:
    """True when the status (or a record's status) is an outcome. A lost job has ended too:
    readers report it `failed`; `outcome_recorded` tells it from a recorded one."""
    status = job.get("status") if isinstance(job, dict) else job
    return status in ENDED


def is_lost(record: JobRecord | dict[str, Any]) -> bool:
    """True for a record a reader marked lost (its supervisor vanished without an outcome)."""
    return bool(record.get("lost"))


def outcome_recorded(record: JobRecord | dict[str, Any]) -> bool:
    """True when the job's own supervisor (or a cancel) wrote its outcome: ended, not lost."""
    return has_ended(record) and not is_lost(record)


# -- the one atomic writer -----------------------------------------------------------------

_SEQ = itertools.count()  # tmp names unique across this process's threads


def fsync_dir(folder: Path | str) -> None:
    """Make a rename in ``folder`` durable (its entry is in the folder, not the file)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to a tmp file beside ``path``, fsync it, rename it over ``path``, fsync
    the folder: a reader sees the old file or the new one, never a part, and no tmp file is
    left behind on failure. ``mode``: exact permission bits (default 0o666 less the umask)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_SEQ)}.tmp")
    # Created private when exact bits are asked for, so no one opens it before the chmod.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: Path | str, text: str, mode: int | None = None) -> None:
    """`write_bytes_atomic` for UTF-8 text (pid files, exit_code, TOML, JSON)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json_atomic(path: Path | str, data: Any) -> None:
    """`write_bytes_atomic` for a JSON document (indented, newline-terminated)."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


# -- job.json: read, and read-modify-write under the lock -----------------------------------


def read_job(path: Path | str) -> JobRecord:
    """job.json as written (no lost rule: veri_tui.launch.records applies that); raises
    OSError when missing, ValueError when not JSON."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def job_lock(path: Path | str) -> Iterator[None]:
    """Hold the exclusive lock of job.json ``path`` (flock on its sidecar ``job.json.lock``).

    A sidecar, because job.json itself is replaced on every write: a lock on the old file
    would not exclude a writer that opened the new one. The kernel drops a flock when its
    holder dies, so a killed writer never leaves the job locked.
    """
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def modify_job(path: Path | str, change: Callable[[JobRecord], JobRecord | None]) -> JobRecord:
    """Read job.json, apply ``change`` (it edits the record in place, or returns a new
    one), write it back atomically, all under the job lock; returns the record written."""
    with job_lock(path):
        record = read_job(path)
        new = change(record)
        if new is not None:
            record = new
        write_json_atomic(path, record)
    return record


def update_job(path: Path | str, **fields: Any) -> JobRecord:
    """Set top-level fields of job.json under the job lock; returns the new record."""
    return modify_job(path, lambda record: record.update(fields))  # type: ignore[typeddict-item]


def record_cancel(path: Path | str) -> JobRecord:
    """Record `cancelled` unless an outcome is already written (a cancel that raced the
    supervisor's own end keeps that end); returns the record."""

    def cancel(record: JobRecord) -> None:
        if not has_ended(record):
            record.update(status=CANCELLED, ended_at=now_iso())

    return modify_job(path, cancel)
