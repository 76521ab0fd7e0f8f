"""The session's shared servers, one each whatever folder asks for them: `sshd` and `sshd2`
(two real OpenSSH servers on 127.0.0.1, support/sshd.py) and `slurm_cluster` (one real Slurm
cluster, support/slurm_cluster.py); and `once_per_session`, a result made once for all the
session's xdist workers.

tests/conftest.py imports these fixtures, so tests/ssh, tests/slurm and the backend
conformance suite (tests/backends) share one instance of each per session (per xdist worker)
instead of starting their own. Without sshd, or without the Slurm and munge programs or root,
the tests that ask for them skip with the reason, unless VERI_REQUIRE_SSHD=1 or
VERI_REQUIRE_SLURM=1 (CI), where they fail instead.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.slurm_cluster import SlurmCluster, missing_tools
from support.sshd import ALIAS, Sshd, serve


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """The test server (alias veri-test)."""
    yield from serve(tmp_path_factory, ALIAS)


@pytest.fixture(scope="session")
def sshd2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """A second server (its own port and host key): the second node of multi-node tests."""
    yield from serve(tmp_path_factory, "veri-test-2")


def _slurm_unavailable() -> str | None:
    missing = missing_tools()
    if missing:
        return (
            f"Slurm is not installed here ({', '.join(missing)} missing): "
            "apt-get install slurmctld slurmd slurm-client munge (CI sets VERI_REQUIRE_SLURM=1)"
        )
    if os.geteuid() != 0:
        return "the test cluster's slurmd must run as root (it starts jobs as their user)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The session's cluster: nodes 127.0.0.1 and 127.0.0.2, partitions debug, gpu, odd."""
    reason = _slurm_unavailable()
    if reason is not None:
        if os.environ.get("VERI_REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    # A second try with fresh ports and folders: a daemon that dies at start (a port taken
    # between the pick and the bind) says nothing about the code under test.
    for attempt in (1, 2):
        cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
        try:
            cluster.start()
            break
        except RuntimeError as exc:
            cluster.stop()
            if attempt == 2:
                pytest.fail(f"the test cluster did not start twice: {exc}")
    yield cluster
    cluster.stop()


def once_per_session(factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()``'s result (JSON-serialisable), made once for every worker of this run.

    A session fixture runs once per worker that asks for it; when modules on different
    workers need the same expensive result (an uninterrupted reference run: seconds of two
    CPU ranks), the first worker to ask computes it under a lock in the run's own temporary
    folder and the others read the file it left. Without xdist it simply computes: the
    folder above a lone session's basetemp is shared by every session of the user."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return compute()
    root = factory.getbasetemp().parent  # pytest-<N>/: this run's, above popen-gw<k>/
    kept = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker computes; the others wait, read
        if kept.exists():
            return json.loads(kept.read_text())
        result = compute()
        tmp = kept.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.rename(kept)
        return result
