"""One real Slurm cluster for the whole test session (tests/support/slurm_cluster.py).

munged, slurmctld and two slurmd on 127.0.0.1, in a temporary folder, started once and stopped
(every job scancelled first) at the end. Without the Slurm and munge programs, or when not
root (slurmd starts jobs as their user), the tests skip with the reason, unless
VERI_REQUIRE_SLURM=1 (CI), where they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from support.slurm_cluster import SlurmCluster, missing_tools


def _unavailable() -> str | None:
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
    reason = _unavailable()
    if reason is not None:
        if os.environ.get("VERI_REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        pytest.fail(f"the test cluster did not start: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster, with SLURM_CONF set for this test's Slurm clients; jobs a test left are
    scancelled after it."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    yield slurm_cluster
    slurm_cluster.cancel_all()
