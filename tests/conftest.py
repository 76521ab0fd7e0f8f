"""Every test folder can import the shared support code as `support.<module>`; under
pytest-xdist, tests that share an expensive fixture run on one worker.

pytest (prepend import mode) already puts tests/ on sys.path for this conftest; saying so
here keeps it true under another import mode too.

The suite runs with `-n 3 --dist loadgroup` (README). Each test gets an `xdist_group`: its
module's path, so a module-scoped fixture (one torchrun reference run, one job shared by a
module's tests) is built once, not once per worker; the Slurm and browser folders are one
group each, so the session's Slurm cluster and Chromium start once, not on every worker (the
backend conformance suite, tests/backends, runs a Slurm backend: it joins the Slurm group).
Without xdist the mark is inert.

The session's servers (`sshd`, `sshd2`, `slurm_cluster`: support/session.py) are fixtures
here, so every folder shares one of each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from support.session import slurm_cluster, sshd, sshd2  # noqa: E402

__all__ = ["slurm_cluster", "sshd", "sshd2"]

#: Folders whose session fixtures (a Slurm cluster, a browser) are too costly to start twice.
ONE_WORKER_FOLDERS = ("slurm", "web")
#: Folders that join another's group (the conformance suite's Slurm backend: the cluster's).
GROUP_OF = {"backends": "slurm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the xdist group it must share a worker with."""
    for item in items:
        rel = Path(str(item.path)).resolve().relative_to(TESTS)
        top = GROUP_OF.get(rel.parts[0], rel.parts[0])
        group = top if top in ONE_WORKER_FOLDERS else rel.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
