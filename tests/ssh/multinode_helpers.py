"""Two test sshd servers as two nodes: one client config naming both, the environment a
fresh `veri-tui` process needs, and the final loss of a job's log."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def two_node_env(sshd, sshd2, tmp_path: Path, probe: bool = False) -> dict[str, str]:
    """os.environ for `veri-tui` reaching both servers (aliases veri-test, veri-test-2).

    A launch's probe of the nodes (docs/probe.md) is skipped (VERI_PROBE=0) unless ``probe``:
    it adds a torchrun per node to every launch; test_multinode_job.py and test_probe.py
    run it."""
    config = tmp_path / "ssh_config"
    config.write_text(sshd.ssh_config.read_text() + sshd2.ssh_config.read_text())
    env = dict(os.environ, VERI_SSH_CONFIG=str(config), VERI_REMOTE_PYTHON=sys.executable,
               VERI_REMOTE_HOME=str(tmp_path / "remote-veri"),
               VERI_HOME=str(tmp_path / "local-veri"))  # fmt: skip
    if not probe:
        env["VERI_PROBE"] = "0"
    env.pop("VERI_KNOWN_HOSTS", None)
    env.pop("SSH_AUTH_SOCK", None)
    return env


def losses(job_dir: Path) -> list[float]:
    """The loss of every metric line in a job folder's rank-0 log (the terminal shows them
    rounded, as rows)."""
    log = (job_dir / "log.txt").read_text()
    return [json.loads(ln)["loss"] for ln in log.splitlines() if ln.startswith('{"step"')]
