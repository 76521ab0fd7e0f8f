"""The app's launch screen with Slurm as the scheduler, against the real test cluster.

Scheduler Slurm, this machine as the login node, partition `gpu` (2 x H100 configured, no
slurmd behind them) and a node typed into `exclude`: the preflight plans for the partition,
the job is submitted with the exclusion (job.json's `slurm.exclude`, the controller's
ExcNodeList) and waits in the queue, the monitor shows Slurm's reason, the jobs screen
too, and cancel scancels it. A bad partition is a failing preflight row, nothing submitted.
One cluster per session.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.slurm_cluster import SlurmCluster
from textual.widgets import DataTable, Input, Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.jobs import JobsScreen
from veri_tui.app.screens.launch import LaunchScreen
from veri_tui.app.screens.monitor import MonitorScreen
from veri_tui.app.screens.plan_editor import PlanEditorScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def app_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "veri"
    monkeypatch.setenv("VERI_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")
    monkeypatch.setenv("VERI_SSH_CONFIG", str(tmp_path / "no-ssh-config"))
    monkeypatch.chdir(tmp_path)
    return home


async def _wait(pilot, cond, timeout: float, what) -> None:
    """Wait for ``cond``; ``what`` (a text, or a function giving one) names it on time-out."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {said}")
        await pilot.pause(0.2)


def _text(screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def _type(pilot, key: str, text: str) -> None:
    """Type ``text`` into the Slurm field ``key`` (emptied first) and press enter."""
    field = pilot.app.screen.query_one(f"#slurm-{key}", Input)
    field.focus()
    field.value = ""
    await pilot.press(*text, "enter")


async def test_a_slurm_job_from_the_app_waits_with_its_reason_and_cancels(
    slurm: SlurmCluster, app_home: Path
) -> None:
    app = create_app()
    async with app.run_test(size=(120, 50)) as pilot:
        await _wait(pilot, lambda: isinstance(app.screen, PlanEditorScreen), 30, "the editor")
        await pilot.press("ctrl+l")
        await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
        launch = app.screen
        # Pushed is not mounted yet: its on_mount hides the Slurm fields (a loaded machine
        # shows the gap).
        await _wait(pilot, lambda: launch.is_mounted, 10, "the launch screen mounted")
        assert not launch.query_one("#slurm-fields").display
        launch.query_one("#scheduler", Select).value = "slurm"
        await pilot.pause()
        assert launch.query_one("#slurm-fields").display
        assert not launch.query_one("#direct-fields").display
        # A debug-partition node: one sbatch knows, which this job would never get anyway.
        await _type(pilot, "exclude", "127.0.0.2")
        await _type(pilot, "partition", "nope")
        await _wait(pilot, lambda: "FAIL" in _text(launch, "#preflight"), 30, "a refusal")
        assert "partition" in _text(launch, "#preflight") and not launch.ready
        assert slurm.jobs() == []
        await _type(pilot, "partition", "gpu")
        passed = lambda: launch.ready  # noqa: E731
        await _wait(pilot, passed, 90, lambda: f"the preflight: {_text(launch, '#preflight')}")
        await pilot.press("ctrl+l")
        await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 60, "the monitor")
        monitor = app.screen
        await _wait(
            pilot, lambda: "status pending (" in _text(monitor, "#mon-status"), 60, "a reason"
        )
        (slurm_id,) = slurm.jobs()
        record = monitor.record or {}
        assert (record.get("scheduler") or {}).get("id") == slurm_id
        assert record["spec"]["slurm"]["partition"] == "gpu"
        assert record["spec"]["slurm"]["exclude"] == "127.0.0.2"
        assert "ExcNodeList=127.0.0.2" in slurm.run("scontrol", "show", "job", slurm_id)
        assert record["spec"]["gpu"] == "H100-80GB" and record["spec"]["gpu_count"] == 2
        await pilot.press("ctrl+b")
        await _wait(pilot, lambda: isinstance(app.screen, JobsScreen), 10, "the jobs screen")
        table = app.screen.query_one(DataTable)
        await _wait(pilot, lambda: table.row_count == 1, 30, "the job listed")
        assert str(table.get_row_at(0)[1]).startswith("pending (")
        await pilot.press("escape")
        await _wait(pilot, lambda: app.screen is monitor, 10, "the monitor again")
        await pilot.press("c")
        await _wait(pilot, lambda: monitor.status == "cancelled", 60, "the job cancelled")
    deadline = time.monotonic() + 30
    while slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert slurm.jobs() == []
