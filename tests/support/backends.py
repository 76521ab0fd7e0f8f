"""The Backends the conformance suite (tests/backends) runs: each one's name, where the launch
facade sends a job (its `host`), and the environment that reaches it. Every "remote" is this
machine in tmp folders, so a test reads a job's folders and pids directly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: The backends, in the order they run (cheapest first).
BACKENDS = ("local", "ssh", "two-host", "slurm")


@dataclass
class Backend:
    """One backend under test: its name, where the facade sends a job, its cluster if any."""

    name: str
    where: Any
    root: Path
    cluster: Any = None
    env: dict[str, str] = field(default_factory=dict)


def backend_env(
    name: str, request: pytest.FixtureRequest, root: Path
) -> tuple[Any, dict[str, str], Any]:
    """(where, environment, cluster) of backend ``name``."""
    env = {"VERI_HOME": str(root / "local-veri"), "VERI_PROBE": "0"}
    if name == "local":
        return None, env, None
    if name == "slurm":
        from veri_tui.launch import jobs

        cluster = request.getfixturevalue("slurm_cluster")
        where = jobs.slurm_options(None, {"login": "local", "partition": "debug"})
        return where, {**env, **cluster.env}, cluster
    servers = [request.getfixturevalue("sshd")]
    if name == "two-host":
        servers.append(request.getfixturevalue("sshd2"))
    config = root / "ssh_config"
    config.write_text("".join(s.ssh_config.read_text() for s in servers))
    env.update(VERI_SSH_CONFIG=str(config), VERI_REMOTE_PYTHON=sys.executable,
               VERI_REMOTE_HOME=str(root / "remote-veri"))  # fmt: skip
    aliases = [s.alias for s in servers]
    return (aliases[0] if len(aliases) == 1 else aliases), env, None
