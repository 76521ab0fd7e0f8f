"""Helpers shared by the SSH test modules: the CLI in a fresh process.

A fresh process is what a user runs: it reads VERI_HOME, VERI_SSH_CONFIG, VERI_REMOTE_HOME and
VERI_REMOTE_PYTHON from the environment the `ssh_env` fixture set, and keeps no state between
commands, so `jobs`, `logs` and `cancel` are shown to work from the job folders alone.
"""

from __future__ import annotations

import subprocess
import sys


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`veri-tui ARGS` in a new interpreter; ``env`` replaces the environment when given."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
