"""Job records (job.json) as the launch side reads them: state rebuilt from the folder, log lines.

A job's truth is its folder (docs/interfaces.md section 2; trainer/jobdir.py). A job record
that still says
``pending`` or ``running`` although its supervisor is gone (machine restarted, supervisor
killed) is reported as ``failed`` with ``error.code`` ``RANK_LOST`` and ``lost: true``; the
file itself is left as the supervisor last wrote it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from trainer.failures import job_error
from trainer.jobdir import FAILED, JOB_FILE, JobRecord, has_ended, read_job
from trainer.procs import SUPERVISOR_PID, pid_alive, read_pid
from veri_tui.errors import VeriError

#: A pending job whose supervisor never wrote its pid within this long is lost.
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LogLine:
    """One complete line of the rank-0 log: ``text`` without its newline, and the byte
    offsets it spans, ``end`` being where to resume reading after it."""

    start: int
    end: int
    text: str


def split_lines(data: bytes, offset: int) -> tuple[list[LogLine], int]:
    """Complete lines in ``data`` (read from ``offset``) and the offset after the last one."""
    lines, pos = [], 0
    while (nl := data.find(b"\n", pos)) >= 0:
        text = data[pos:nl].decode("utf-8", "replace")
        lines.append(LogLine(offset + pos, offset + nl + 1, text))
        pos = nl + 1
    return lines, offset + pos


def read_record(job_dir: Path) -> JobRecord:
    """job.json of ``job_dir`` with the lost-supervisor rule applied; raises VeriError."""
    path = job_dir / JOB_FILE
    try:
        record = read_job(path)
    except FileNotFoundError:
        raise VeriError(f"no job {job_dir.name}; `veri-tui jobs` lists them", key="job") from None
    except ValueError as exc:
        raise VeriError(f"{path}: unreadable ({exc})", key="job") from None
    if has_ended(record):
        return record
    pid = read_pid(job_dir / SUPERVISOR_PID)
    if pid is None:
        # A resumed job waits for its new supervisor from the resume on, not from creation.
        created = _epoch(record.get("resumed_at") or record.get("created_at"))
        if created is None or time.time() - created < START_TIMEOUT_S:
            return record  # just launched: the supervisor has not written its pid yet
        return lost_record(record, "its supervisor never started")
    if pid_alive(pid):
        return record
    # The supervisor may have finished between our two reads: trust the file once more.
    again = read_job(path)
    if has_ended(again):
        return again
    return lost_record(record, f"its supervisor (pid {pid}) is gone without recording an outcome")


def _epoch(iso: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def lost_record(record: JobRecord, why: str) -> JobRecord:
    """The job record of a job whose supervisor vanished without recording an outcome (local or
    remote): failed, ``lost: true``, error RANK_LOST saying ``why``."""
    msg = f"job lost: {why} (machine restarted or process killed)"
    world = (record.get("spec") or {}).get("gpu_count")
    error = job_error("RANK_LOST", msg, world, summary=msg)
    lost: JobRecord = {**record, "status": FAILED, "lost": True, "error": error}
    return lost


def wait_until_ended(get_job: Callable[[], JobRecord], poll_s: float) -> JobRecord:
    """Poll ``get_job()`` until the job has ended (either target); returns the final record."""
    while not has_ended(record := get_job()):
        time.sleep(poll_s)
    return record


def follow_lines(
    read_from: Callable[[int], bytes],
    is_done: Callable[[], bool],
    offset: int = 0,
    poll_s: float = 0.2,
) -> Iterator[LogLine]:
    """Yield complete lines from ``offset`` until ``is_done()`` and the log is drained.

    ``read_from(offset)`` returns the bytes from ``offset`` to the current end. A last line
    without a newline is yielded once the job has ended (nothing more will complete it).
    """
    pending = b""
    base = offset
    while True:
        done = is_done()  # checked before reading, so bytes written before the end are seen
        chunk = read_from(base + len(pending))
        pending += chunk
        lines, new_base = split_lines(pending, base)
        yield from lines
        pending = pending[new_base - base :]
        base = new_base
        if done:
            if pending:
                yield LogLine(base, base + len(pending), pending.decode("utf-8", "replace"))
            return
        if not chunk:
            time.sleep(poll_s)
