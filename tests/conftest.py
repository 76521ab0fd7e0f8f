"""Every test folder can import the shared support code as `support.<module>`; under
pytest-xdist, tests that share an expensive fixture run on one worker, and the costliest
groups start first.

pytest (prepend import mode) already puts tests/ on sys.path for this conftest; saying so
here keeps it true under another import mode too.

The suite runs with `-n 3 --dist loadgroup` (README). Each test gets an `xdist_group`: its
module's path, so a module-scoped fixture (one torchrun reference run, one job shared by a
module's tests) is built once, not once per worker. The backend conformance suite's module
fixture is parametrized by backend, so each backend is its own group. tests/web is one group:
its server and Chromium start once. The session's servers (`sshd`, `sshd2`, `slurm_cluster`:
support/session.py) are session fixtures, so each worker that asks starts its own: a Slurm
cluster takes 1.3 to 1.5 s to start, far less than a chain of every Slurm module on one
worker (minutes) would cost in balance.

Under xdist the groups are handed out in collection order (`--no-loadscope-reorder`, set
here), and collection puts the costliest groups first: a group's cost is its slow tests
(torchrun, sshd, Slurm, a browser), counted, then its fast ones. Longest first keeps a long
group from starting last, when the other worker has nothing left to do. Without xdist the
marks are inert and the order is pytest's. The launch preflight's data check keeps its
answers in one folder per worker for the session (VERI_DATACHECK_CACHE, pytest_configure).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from support.leaks import kill_processes_mentioning  # noqa: E402
from support.session import slurm_cluster, sshd, sshd2  # noqa: E402

__all__ = ["slurm_cluster", "sshd", "sshd2"]

# No per-example deadline: on a loaded 2-core machine an example's 200 ms default fails a
# property that holds (seen in tests/plan/test_calibration.py at a load average of 12-15).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

#: Folders whose session fixtures (a browser and a server) are worth starting once.
ONE_WORKER_FOLDERS = ("web",)
#: A slow test weighs this many fast ones when the groups are ordered.
SLOW_WEIGHT = 100


def _group(item: pytest.Item) -> str:
    """The xdist group of ``item``: its folder for ONE_WORKER_FOLDERS, else its module, and
    per parameter for a parametrized module-scoped fixture (tests/backends)."""
    rel = Path(str(item.path)).resolve().relative_to(TESTS)
    if rel.parts[0] in ONE_WORKER_FOLDERS:
        return rel.parts[0]
    backend = getattr(item, "callspec", None) and item.callspec.params.get("backend")
    # no "]" in a group's name: xdist takes what follows the last "@" as the group only when
    # no "]" comes after it (its test ids end in "]" where parametrized)
    return f"{rel.as_posix()}:{backend}" if backend else rel.as_posix()


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that has a tmp_path, every process naming that folder is killed
    (support/leaks.py): a job a failing test launched detached must not run on beside the
    rest of the suite."""
    folder = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if folder is not None:
        kill_processes_mentioning(str(folder))


@pytest.fixture(autouse=True, scope="session")
def _autograd_started_on_fake_cuda() -> None:
    """The worker's first backward runs on fake CUDA, before any test's
    (support/fakecuda.start_autograd_on_fake_cuda): the in-process traces then pass
    whichever tests ran before them on the worker. Only where a collected module uses the
    harness (collection imported it): a run of tests/plan pays no torch import for it."""
    if "support.fakecuda" in sys.modules:
        sys.modules["support.fakecuda"].start_autograd_on_fake_cuda()


def pytest_configure(config: pytest.Config) -> None:
    """Keep the collection's order when handing out groups (xdist >= 3.8 sorts them by test
    count otherwise, and a count says little about a group's cost). Every test's launches
    share one kept answer of the data check per input (launch/datacheck.py: about 2 CPU-s a
    launch, most tests launching the bundled model on the bundled sample), not one per test's
    fresh VERI_HOME; a worker's own folder, gone with the session."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if "VERI_DATACHECK_CACHE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="veri-datacheck-")
        os.environ["VERI_DATACHECK_CACHE"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Set what collection imported (torch, transformers, textual, the tests' modules:
    objects that live as long as the worker) aside from the cyclic collector
    (`gc.freeze`), so its full passes stop walking them during every test: 6-7% less CPU for
    the in-process tests (tests/plan and two app modules, 2026-12-07, docs/ci.md). Garbage
    that tests make is collected as before."""
    gc.freeze()


# tryfirst: xdist's worker reads the marks in its own pytest_collection_modifyitems, and as a
# plugin registered after this conftest its hook would otherwise run first, before any mark
# is set (then every test is its own group, and a module's fixture runs on both workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its xdist group; under xdist, the costliest groups first."""
    groups = {id(item): _group(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[id(item)]))
    if not hasattr(config, "workerinput"):
        return
    cost: Counter[str] = Counter()
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        cost[groups[id(item)]] += SLOW_WEIGHT if item.get_closest_marker("slow") else 1
        first.setdefault(groups[id(item)], i)
    # sort() is stable: within a group, pytest's order (module fixtures, parameters) stays.
    items.sort(key=lambda item: (-cost[groups[id(item)]], first[groups[id(item)]]))
