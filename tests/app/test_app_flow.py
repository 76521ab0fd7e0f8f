"""The whole flow with the real launcher and trainer (2 CPU processes under torchrun).

Start on the bundled model, edit knobs (including a refused one), launch locally, watch the
run monitor until the job ends; a bad data row shows the failure panel; quitting during a
run, then reattaching from the jobs screen, follows the job live and its `c` cancels it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from app_helpers import editor_ready
from app_helpers import pilot_wait as _wait
from app_helpers import type_into as _type
from textual.widgets import Button, DataTable, ProgressBar, Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.jobs import JobsScreen
from veri_tui.app.screens.launch import LaunchScreen
from veri_tui.app.screens.monitor import MonitorScreen
from veri_tui.app.screens.plan_editor import PlanEditorScreen
from veri_tui.app.widgets.charts import LossChart
from veri_tui.app.widgets.failure_panel import FailurePanel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _kill_leftovers(veri_home: Path):
    """A job a failing test left running must not slow the next one down."""
    yield
    for pid_file in veri_home.glob("jobs/*/*.pid"):
        _kill(pid_file)
    for pid_file in veri_home.glob("jobs/*/pids/*"):
        _kill(pid_file)


def _kill(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
    except (ValueError, OSError):
        pass


def _plan_line(screen) -> str:
    return str(screen.query_one("#plan-line", Static).render())


async def _launch(pilot, *, max_steps: int, dataset: str | None = None) -> MonitorScreen:
    """From the editor: 2 processes, `max_steps`; launch screen, preflight, confirm."""
    app = pilot.app
    await _type(pilot, "#knob-gpu_count", "2")
    await _type(pilot, "#knob-max_steps", str(max_steps))
    await pilot.press("ctrl+l")
    await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
    if dataset:
        await _type(pilot, "#dataset", dataset)
        await pilot.press("enter")  # the dataset is checked on Enter
    # The preflight encodes every row with the model's tokenizer in a child process (about 2
    # CPU-s, transformers' imports): on a loaded 2-core machine well over 30 s.
    await _wait(pilot, lambda: app.screen.ready, 90, "preflight to pass")
    shown = str(app.screen.query_one("#preflight", Static).render())
    assert "ok   dataset" in shown
    # Where the ranks run, said plainly: no CUDA GPU on this machine (issue 35).
    assert "WARN device: no CUDA GPU on this machine: the job runs 2 CPU processes (gloo) " in shown
    await pilot.press("ctrl+l")
    await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 30, "the run monitor")
    return app.screen


async def test_whole_flow_plan_refuse_fix_launch_watch(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        editor = app.screen
        assert isinstance(editor, PlanEditorScreen)
        assert "tiny-model (bundled)" in str(editor.query_one("#model-line", Static).render())
        editor.query_one("#knob-gpu", Select).value = "L4-24GB"
        await _type(pilot, "#knob-gpu_count", "4")
        assert _plan_line(editor).startswith("plan: dp=4 ")
        editor.query_one("#knob-zero_stage", Select).value = "1"
        await pilot.pause()
        assert editor.query_one("#err-zero_stage").has_class("-shown")
        assert "ZeRO-1 is not available" in str(editor.query_one("#err-zero_stage").render())
        assert editor.query_one("#launch", Button).disabled
        editor.query_one("#knob-zero_stage", Select).value = "auto"
        await pilot.pause()
        assert not editor.query_one("#launch", Button).disabled

        monitor = await _launch(pilot, max_steps=3)
        await _wait(pilot, lambda: monitor.status == "succeeded", 90, "the job to succeed")
        await pilot.pause(0.5)
        plan = str(monitor.query_one("#mon-plan", Static).render())
        assert plan.startswith("plan: dp=2 zero_stage=0 ") and "gbs=2" in plan
        bar = monitor.query_one(ProgressBar)
        assert (bar.progress, bar.total) == (3, 3)
        assert [p[0] for p in monitor.query_one(LossChart).points] == [1, 2, 3]
        assert "status succeeded" in str(monitor.query_one("#mon-status", Static).render())
        assert not monitor.query_one(FailurePanel).display


async def test_bad_data_row_is_a_failing_preflight_row(veri_home: Path, tmp_path: Path) -> None:
    # Refused before anything starts (issue 27): the launch screen's preflight names the
    # file and line, launch stays disabled, no job folder is made. (A data error found only
    # while tokenizing is one line in the failure panel: test_app_monitor.py.)
    rows = (REPO / "assets" / "data" / "sft.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows[:6] + ['{"text": "unterminated'] + rows[6:]) + "\n")
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await _type(pilot, "#knob-gpu_count", "2")
        await pilot.press("ctrl+l")
        await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
        await _type(pilot, "#dataset", str(bad))
        await pilot.press("enter")
        shown = lambda: str(app.screen.query_one("#preflight", Static).render())  # noqa: E731
        await _wait(pilot, lambda: "FAIL dataset" in shown(), 30, "the dataset's row")
        assert f"FAIL dataset: {bad} line 7: not valid JSON" in shown()
        assert not app.screen.ready
    assert not list(veri_home.glob("jobs/*"))


async def test_quit_during_run_reattach_from_jobs_and_cancel(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        monitor = await _launch(pilot, max_steps=100000)
        job_id = monitor.job_id
        await _wait(pilot, lambda: monitor.status == "running", 60, "the job to run")
        await pilot.press("ctrl+q")
    record = json.loads((veri_home / "jobs" / job_id / "job.json").read_text())
    assert record["status"] in ("pending", "running")  # still going without the app

    # A new app finds it on the jobs screen, follows it live, and cancels it.
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+b")
        await _wait(pilot, lambda: isinstance(app.screen, JobsScreen), 5, "jobs screen")
        table = app.screen.query_one(DataTable)
        await _wait(pilot, lambda: table.row_count == 1, 10, "the job in the list")
        table.focus()
        await pilot.press("enter")
        await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 5, "the monitor")
        monitor = app.screen
        assert monitor.job_id == job_id
        await _wait(pilot, lambda: monitor.status == "running", 60, "the job to run")
        chart = monitor.query_one(LossChart)
        seen = len(chart.points)
        await _wait(pilot, lambda: len(chart.points) > seen, 60, "a new step in the chart")
        assert monitor.query_one(ProgressBar).total == 100000
        await pilot.press("c")
        await _wait(pilot, lambda: monitor.status == "cancelled", 60, "the job to be cancelled")
    assert json.loads((veri_home / "jobs" / job_id / "job.json").read_text())["status"] == (
        "cancelled"
    )
