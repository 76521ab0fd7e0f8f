"""`veri-tui` (no command) in a real pseudo-terminal: run_app draws the plan, ctrl+q quits."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest


@pytest.mark.timeout(60)
def test_veri_tui_runs_in_a_terminal_and_quits(veri_home: Path) -> None:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="110", LINES="30")
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    seen = b""
    try:
        deadline = time.monotonic() + 40
        while b"plan: dp=1" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                seen += os.read(leader, 65536)
        assert b"plan: dp=1" in seen, seen[-2000:]
        os.write(leader, b"\x11")  # ctrl+q
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            # Keep draining: an app blocked on a full terminal buffer never reads its input.
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    os.read(leader, 65536)
                except OSError:
                    break
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
