"""The resumable tail against a real sshd: killed and frozen sessions, every line exactly once.

A stand-in writer (a detached remote loop appending numbered lines) makes the log long-lived
enough to break the connection mid-way; the real-job version is in test_ssh_job.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.tail import Reconnected, follow_remote

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

WRITER = """\
import sys, time
with open(sys.argv[1], "ab", buffering=0) as log:
    for i in range(int(sys.argv[2])):
        log.write(b"line %05d " % i + b"x" * (i % 50) + b"\\n")
        time.sleep(float(sys.argv[3]))
    log.write(b"no newline at the end")
"""


def _start_writer(conn: Connection, tmp_path: Path, lines: int, delay: float) -> tuple[Path, int]:
    script, log = tmp_path / "writer.py", tmp_path / "log file; $(touch x).txt"
    script.write_text(WRITER)
    res = conn.run_line(
        f"setsid nohup {sys.executable} {script} '{log}' {lines} {delay} >/dev/null 2>&1 "
        "</dev/null & echo $!"
    )
    return log, int(res.stdout)


def _client_port(conn: Connection) -> int:
    return conn.transport.sock.getsockname()[1]


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_tail_resumes_exactly_once(ssh_env, tmp_path: Path, how: str) -> None:
    conn = Connection.open(ssh_env.alias)
    log, pid = _start_writer(conn, tmp_path, lines=300, delay=0.02)
    events: list[Reconnected] = []
    got: list[str] = []
    broken: dict[str, float] = {}
    frozen: list[int] = []

    def breaker() -> None:
        port = _client_port(conn)
        if how == "kill":
            ssh_env.signal_session(port, signal.SIGKILL)
        else:
            frozen.extend(ssh_env.signal_session(port, signal.SIGSTOP))
        broken["at"] = time.monotonic()

    for line in follow_remote(conn, str(log), pid, on_reconnect=events.append):
        got.append(line.text)
        if len(got) == 60 and not broken:
            threading.Thread(target=breaker).start()
    for p in frozen:
        os.kill(p, signal.SIGCONT)
    conn.close()
    assert len(events) == 1, events
    noticed = events[0].noticed_at - broken["at"]
    print(f"{how}: noticed after {noticed:.2f} s, reason: {events[0].reason}")
    assert noticed < 15
    assert ("frozen" in events[0].reason) == (how == "freeze")
    remote = log.read_bytes()
    assert "\n".join(got).encode() == remote  # byte-identical, last partial line included
    assert len(got) == 301
