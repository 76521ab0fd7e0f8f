"""Helpers for the job-side tests: the CLI in a fresh process, wait for a job, and find any
process it left behind (pid files and /proc, the same search cancel uses)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import JOB_FILE, SUPERVISOR_PID
from veri_tui.jobfolder.contract.procs import job_processes, pid_alive, read_pid
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch import jobs


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def leftover_pids(job_dir: Path) -> list[int]:
    """Every live process of the job: supervisor, torchrun, ranks (by pid file and /proc)."""
    pids = job_processes(job_dir / JOB_FILE)
    sup = read_pid(job_dir / SUPERVISOR_PID)
    return pids + ([sup] if sup and pid_alive(sup) else [])


def wait_ended(job_id: str, timeout: float = 60) -> dict:
    """The job's record once it has ended."""
    return wait_for(lambda: has_ended(r := jobs.get_job(job_id)) and r, timeout, "job end")


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    """`veri-tui ARGS` in a fresh process (``env``: the environment, default this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
