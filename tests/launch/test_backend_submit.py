"""A backend's `submit` (veri_tui/launch/backends/supervised.py) on this machine: the typed
handle of the nodes it started, and `SubmitError` naming which ones did when one cannot be
(the launch sequence then ends those). Fast: each supervisor finds no job.json and exits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jobfolder.procs import pid_alive
from veri_tui.launch import backends
from veri_tui.launch.backends.ref import JobRef, SubmitError
from veri_tui.launch.local_host import LocalHost, reap


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reap()
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_submit_returns_every_nodes_handle(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    direct = backends.named("direct")
    ref = direct.submit("j1", [LocalHost(), LocalHost()], [str(d) for d in dirs])
    assert isinstance(ref, JobRef) and (ref.backend, ref.kind, ref.job_id) == (
        "direct", "local", "j1")  # fmt: skip
    assert [n.job_dir for n in ref.nodes] == [str(d) for d in dirs]
    assert all(isinstance(h, int) for h in ref.handles), ref
    assert all(_gone(h) for h in ref.handles if h is not None)
    assert all((d / "supervisor.log").is_file() for d in dirs)  # each one's output


def test_a_node_that_cannot_start_is_named_in_the_error(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    direct = backends.named("direct")
    with pytest.raises(SubmitError) as caught:
        direct.submit("j2", [LocalHost(), LocalHost()], [str(good), str(tmp_path / "none")])
    ref = caught.value.ref
    assert ref.nodes[0].handle is not None and ref.nodes[1].handle is None, ref
    assert isinstance(caught.value.cause, FileNotFoundError), caught.value.cause
    assert _gone(ref.nodes[0].handle)
