"""The one way files of a job folder are written: atomically, and job.json under its lock.

`write_*_atomic` is the one atomic writer (tmp file beside the target, fsync, os.replace,
fsync of the folder): no reader sees a half-written file, and a crash leaves the old or the
new file. Every read-modify-write of job.json goes through `modify_job`, under an exclusive
flock on the sidecar `job.json.lock`, so concurrent writers (the supervisor, cancel, resume)
never lose each other's updates.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from veri_tui.jobfolder.contract.record import JobRecord, now_iso, read_job
from veri_tui.jobfolder.contract.status import CANCELLED, has_ended

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

    def change(record: JobRecord) -> None:
        cast("dict[str, Any]", record).update(fields)  # any key: the caller names it

    return modify_job(path, change)


def record_cancel(path: Path | str) -> JobRecord:
    """Record `cancelled` unless an outcome is already written (a cancel that raced the
    supervisor's own end keeps that end); returns the record."""

    def cancel(record: JobRecord) -> None:
        if not has_ended(record):
            record.update({"status": CANCELLED, "ended_at": now_iso()})

    return modify_job(path, cancel)
