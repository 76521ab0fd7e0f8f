"""The Backends the conformance suite (tests/backends) runs: each one's name, where the launch
facade sends a job (its `host`), and the environment that reaches it. Every "remote" is this
machine in tmp folders, so a test reads a job's folders and pids directly.

Beside the built-in ones, a backend brought by a plugin is run when a folder
`tests/backends/<name>/` holds its `conformance.py`: `target(request, root)` installs the
plugin for the module's tests (its `veri_tui_backends/<name>/` on sys.path, as an installed
distribution would put it) and returns (where, environment, cluster, teardown).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: Where a plugin backend's test folder is (its `conformance.py`).
PLUGINS = Path(__file__).resolve().parents[1] / "backends"
#: The backends, in the order they run (cheapest first), the plugins' last.
BACKENDS = ("local", "ssh", "two-host", "slurm") + tuple(
    sorted(p.parent.name for p in PLUGINS.glob("*/conformance.py"))
)


@dataclass
class Backend:
    """One backend under test: its name, where the facade sends a job, its cluster if any."""

    name: str
    where: Any
    root: Path
    cluster: Any = None
    env: dict[str, str] = field(default_factory=dict)


def _plugin(name: str) -> Any:
    """The plugin backend ``name``'s conformance module (tests/backends/<name>/)."""
    path = PLUGINS / name / "conformance.py"
    spec = importlib.util.spec_from_file_location(f"conformance_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def backend_env(
    name: str, request: pytest.FixtureRequest, root: Path
) -> tuple[Any, dict[str, str], Any, Callable[[], None]]:
    """(where, environment, cluster, teardown) of backend ``name``."""
    env = {"VERI_HOME": str(root / "local-veri"), "VERI_PROBE": "0"}
    if name == "local":
        return None, env, None, _nothing
    if (PLUGINS / name / "conformance.py").is_file():
        where, more, cluster, teardown = _plugin(name).target(request, root)
        return where, {**env, **more}, cluster, teardown
    if name == "slurm":
        from veri_tui.launch import jobs

        cluster = request.getfixturevalue("slurm_cluster")
        where = jobs.where_of("slurm", {"login": "local", "partition": "debug"})
        return where, {**env, **cluster.env}, cluster, _nothing
    servers = [request.getfixturevalue("sshd")]
    if name == "two-host":
        servers.append(request.getfixturevalue("sshd2"))
    config = root / "ssh_config"
    config.write_text("".join(s.ssh_config.read_text() for s in servers))
    env.update(VERI_SSH_CONFIG=str(config), VERI_REMOTE_PYTHON=sys.executable,
               VERI_REMOTE_HOME=str(root / "remote-veri"))  # fmt: skip
    aliases = [s.alias for s in servers]
    return (aliases[0] if len(aliases) == 1 else aliases), env, None, _nothing


def _nothing() -> None:
    """A built-in backend has nothing to take back after its tests."""
