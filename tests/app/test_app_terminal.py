"""`veri-tui` (no command) in a real pseudo-terminal: run_app draws the plan, ctrl+q quits;
`veri-tui --model X` opens it on that model."""

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


def _model_copy(tmp_path: Path) -> Path:
    """The bundled tiny model under another name: a local checkpoint of the user's own."""
    import shutil

    from veri_tui.app.first_plan import _BUNDLED

    return Path(shutil.copytree(_BUNDLED, tmp_path / "my-model"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("on_model", [False, True], ids=["bundled", "--model"])
def test_veri_tui_runs_in_a_terminal_and_quits(
    veri_home: Path, tmp_path: Path, on_model: bool
) -> None:
    args = ["--model", str(_model_copy(tmp_path))] if on_model else []
    expected = f"model {args[1]}: 156,032 parameters" if on_model else "tiny-model (bundled)"
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="110", LINES="30")
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", *args],
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
        # Both may come in separate writes (textual draws changed regions, not whole screens).
        wanted = (b"plan: dp=1", expected.encode())
        while not all(w in seen for w in wanted) and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                seen += os.read(leader, 65536)
        assert b"plan: dp=1" in seen, seen[-2000:]
        assert expected.encode() in seen, seen[-2000:]
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


def test_model_before_a_command_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    from veri_tui.cli import main

    assert main(["--model", "org/name", "plan"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --model: before a command it opens the app; write `veri-tui plan --model org/name`"
    ]
