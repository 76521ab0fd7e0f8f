"""The suite's guard against a test's leftover processes (support/leaks.py): a detached
process naming the test's folder, and the child it starts, are found and killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from support.leaks import kill_processes_mentioning, processes_mentioning


def test_a_detached_process_and_its_child_are_killed(tmp_path: Path) -> None:
    marker = tmp_path / "job.json"
    # A parent in its own session with a child naming the folder, as a detached supervisor
    # and its torchrun: both found, both killed.
    child = "import subprocess, sys, time; time.sleep(300)"
    script = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, {str(marker)!r}]); time.sleep(300)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(marker)], start_new_session=True)
    deadline = time.monotonic() + 30
    while len(processes_mentioning(str(tmp_path))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    both = processes_mentioning(str(tmp_path))
    assert parent.pid in both and len(both) == 2
    assert sorted(kill_processes_mentioning(str(tmp_path))) == sorted(both)
    parent.wait(5)
    assert processes_mentioning(str(tmp_path)) == []
    assert kill_processes_mentioning(str(tmp_path)) == []  # nothing left: returns at once
