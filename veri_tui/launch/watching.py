"""A multi-node job's watcher (watcher.py), from the launcher's side: started detached at
launch and at every resume, stopped before a cancel or a resume; its pid kept in the job's
registry entry (registry.py), its output in `$VERI_HOME/remote/<id>.watcher.log`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from veri_tui.jobfolder.contract.procs import pid_alive
from veri_tui.launch import registry

if TYPE_CHECKING:
    from veri_tui.launch.target import JobTarget

#: How long a watcher may take to go: it finishes a restart it has begun.
STOP_S = 30.0


def start_watcher(job: JobTarget) -> None:
    """A multi-node job gets its watcher, started detached in its own session (it outlives
    this process): the process that ends the other nodes of a failed job and retries a
    platform failure. Its pid goes in the registry entry. Nothing for one node."""
    if len(job.nodes) == 1 or job.entry is None:
        return
    log = registry.registry_dir() / f"{job.job_id}.watcher.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "veri_tui.launch.watcher", job.job_id],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    entry = registry.load(job.job_id) or job.entry
    entry.watcher = proc.pid
    registry.save(entry)
    job.entry = entry


def stop_watcher(job: JobTarget) -> None:
    """End the job's watcher (its retries stop with it); waits for it to go."""
    fresh = registry.load(job.job_id) if job.entry is not None else None
    pid = fresh.watcher if fresh is not None else None
    if pid is None or not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.1)
