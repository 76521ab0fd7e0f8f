"""Log lines and waiting, as every job target reads them (target.py, host.py).

A job's truth is its folder (docs/interfaces.md section 2; the jobfolder package), read on its host
by the job target with the one lost rule (veri_tui/jobfolder/contract/lost.py). Here: `LogLine` and
splitting a log read by byte offset into complete lines, following a log until its job has ended,
and waiting for a job's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import has_ended


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
