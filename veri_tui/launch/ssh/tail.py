"""Follow a remote log by byte offset, surviving dropped and frozen connections.

The remote side runs `tail -c +<offset+1> -F <log> --pid=<job pid>`: it starts exactly at the
first byte not yet received, waits for the file to appear, and ends by itself once the job's
process has ended and the file is drained. The client counts the bytes it received, so after
a reconnect nothing is lost or repeated (field notes: 151 of 151 lines).

A dead connection shows as EOF without an exit status; a frozen one shows nothing at all, so
every read has a timeout and a silent period triggers a probe (`open_session` with a timeout).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from veri_tui.errors import VeriError
from veri_tui.launch.loglines import LogLine, split_lines
from veri_tui.launch.ssh.connection import Connection, ConnectionLost, command_line, exited
from veri_tui.launch.ssh.hostkeys import ChangedHostKeyError, UnknownHostKeyError

READ_TIMEOUT_S = 2.0
PROBE_TIMEOUT_S = 3.0
#: Give up reconnecting after this long without a working connection.
RECONNECT_FOR_S = 300.0


@dataclass(frozen=True)
class Reconnected:
    """Reported to `on_reconnect` after a drop was noticed and the connection rebuilt."""

    reason: str
    offset: int
    noticed_at: float  # time.monotonic() when the drop was noticed
    reconnected_at: float


def tail_command(path: str, offset: int, pid: int | None) -> str:
    """The remote tail, from byte `offset` (0-based); stderr dropped (tail's retry chatter)."""
    argv = ["tail", "-c", f"+{offset + 1}", "-F", "-s", "0.5"]
    if pid is not None:
        argv.append(f"--pid={pid}")
    return command_line([*argv, "--", path]) + " 2>/dev/null"


def _read_once(
    conn: Connection, path: str, offset: int, pid: int | None, read_timeout: float,
    probe_timeout: float,
) -> Iterator[bytes | str]:  # fmt: skip
    """Yield chunks from one tail run; finally yields "ended" or the reason it broke off."""
    try:
        chan = conn.exec_channel(tail_command(path, offset, pid))
    except ConnectionLost as exc:
        yield f"could not start tail: {exc}"
        return
    chan.settimeout(read_timeout)
    try:
        while True:
            try:
                data = chan.recv(65536)
            except TimeoutError:
                if conn.probe(probe_timeout):
                    continue  # quiet log, healthy connection
                yield f"no answer to a probe within {probe_timeout:g} s (frozen)"
                return
            except OSError as exc:
                yield f"read failed: {exc}"
                return
            if data:
                yield data
                continue
            # EOF comes a moment before the exit status: wait for it before deciding.
            chan.status_event.wait(probe_timeout)
            yield "ended" if exited(conn, chan) else "the connection closed"
            return
    finally:
        chan.close()


def _reconnect(conn: Connection, reason: str, deadline: float) -> None:
    """Rebuild the connection, retrying each second; a host key problem is never retried."""
    while True:
        try:
            conn.reconnect()
            return
        except (ChangedHostKeyError, UnknownHostKeyError):
            raise
        except VeriError as exc:
            if time.monotonic() > deadline:
                raise ConnectionLost(conn.spec.alias, f"{reason}; last try: {exc}") from exc
        time.sleep(1.0)


def follow_remote(
    conn: Connection,
    path: str,
    pid: int | None,
    offset: int = 0,
    *,
    read_timeout: float = READ_TIMEOUT_S,
    probe_timeout: float = PROBE_TIMEOUT_S,
    reconnect_for: float = RECONNECT_FOR_S,
    on_reconnect: Callable[[Reconnected], None] | None = None,
) -> Iterator[LogLine]:
    """Complete lines of the remote `path` from byte `offset`, until process `pid` has ended.

    A last line without a newline is yielded once the tail has ended.
    """
    pending, base = b"", offset
    while True:
        outcome = "ended"
        for item in _read_once(conn, path, base + len(pending), pid, read_timeout, probe_timeout):
            if isinstance(item, str):
                outcome = item
                break
            pending += item
            lines, new_base = split_lines(pending, base)
            pending, base = pending[new_base - base :], new_base
            yield from lines
        if outcome == "ended":
            if pending:
                yield LogLine(base, base + len(pending), pending.decode("utf-8", "replace"))
            return
        noticed = time.monotonic()
        _reconnect(conn, outcome, noticed + reconnect_for)
        if on_reconnect is not None:
            on_reconnect(Reconnected(outcome, base + len(pending), noticed, time.monotonic()))
