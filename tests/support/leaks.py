"""Processes a test left behind, found by the test's own folder in their command line and
killed, so that one failing test cannot slow every test after it.

Why by command line: a detached job (`veri-tui launch` without --wait) runs in its own
session, and its supervisor, torchrun and ranks all name the job's folder under the test's
tmp_path (`--job .../job.json`, `--log-dir ...`). A job folder's pid files are not enough: a
test that fails right after the launch returns tears down before the ranks have written them
(CI once ran two 100,000-step jobs through the whole suite that way: 72 minutes).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

#: How long to keep looking for processes a dying parent may still start.
SETTLE_S = 1.0


def processes_mentioning(text: str) -> list[int]:
    """Pids of this machine's processes (not this one) whose command line contains text."""
    found, me, needle = [], os.getpid(), text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def kill_processes_mentioning(text: str, deadline_s: float = 10.0) -> list[int]:
    """SIGKILL every process whose command line contains text, again until none has been
    seen for SETTLE_S (a supervisor killed mid-spawn can leave a child that starts late);
    the pids killed."""
    killed: list[int] = []
    quiet_since = time.monotonic()
    end = quiet_since + deadline_s
    while time.monotonic() < end:
        pids = processes_mentioning(text)
        if pids:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_S or not killed:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        time.sleep(0.1)
    return killed
