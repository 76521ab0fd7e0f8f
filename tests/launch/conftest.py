"""Fixtures for the job-side tests: a private VERI_HOME whose leftover processes are killed."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import leftover_pids


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh $VERI_HOME for the test (the launch side reads it on every call); any process
    a job left behind is killed afterwards so one failing test cannot slow the next."""
    path = tmp_path / "veri-home"
    monkeypatch.setenv("VERI_HOME", str(path))
    yield path
    for job_dir in (path / "jobs").glob("*"):
        for pid in leftover_pids(job_dir):
            os.kill(pid, signal.SIGKILL)
