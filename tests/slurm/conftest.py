"""The Slurm tests' fixtures: the session's one real cluster (`slurm_cluster`: munged,
slurmctld and two slurmd on 127.0.0.1, support/slurm_cluster.py) comes from
support/session.py, shared with the backend conformance suite; `slurm` sets this test's
client environment and scancels what the test left.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.slurm_cluster import SlurmCluster


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The cluster, with SLURM_CONF set for this test's Slurm clients; jobs a test left are
    scancelled after it."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    yield slurm_cluster
    slurm_cluster.cancel_all()
