"""Run monitor and jobs screen, fed from job folders written by the test (no trainer)."""

from __future__ import annotations

from pathlib import Path

from app_helpers import DATA_ERROR, PLAN_LINE, editor_ready, write_job
from textual.widgets import DataTable, Log, ProgressBar, Static

from veri_tui.app import create_app
from veri_tui.app.screens.jobs import JobsScreen
from veri_tui.app.screens.monitor import MonitorScreen, fmt_duration, metric_of
from veri_tui.app.widgets.charts import LossChart
from veri_tui.app.widgets.failure_panel import FailurePanel


async def _settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def test_monitor_shows_finished_job(veri_home: Path) -> None:
    write_job(veri_home, "20261129-220000-aaaa")
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        app.open_monitor("20261129-220000-aaaa")
        await _settle(pilot)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert str(screen.query_one("#mon-plan", Static).render()) == PLAN_LINE
        status = str(screen.query_one("#mon-status", Static).render())
        assert "status succeeded" in status and "step 20/20" in status and "took 1m02s" in status
        bar = screen.query_one(ProgressBar)
        assert (bar.progress, bar.total) == (20, 20)
        assert len(screen.query_one(LossChart).points) == 20
        assert "loss" in str(screen.query_one(LossChart).render())
        log = screen.query_one(Log)
        assert log.line_count == 24  # 4 header lines + 20 metric lines
        assert not screen.query_one(FailurePanel).display


async def test_monitor_failure_panel(veri_home: Path) -> None:
    write_job(veri_home, "20261129-220000-bbbb", status="failed", steps=3, error=DATA_ERROR)
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        app.open_monitor("20261129-220000-bbbb")
        await _settle(pilot)
        panel = app.screen.query_one(FailurePanel)
        assert panel.display
        text = str(panel.render())
        assert "code DATA_ERROR" in text and "attribution customer" in text
        assert "rank 1/2 (node 0, local_rank 1)" in text
        assert "Traceback" in text


async def test_jobs_screen_reattaches(veri_home: Path) -> None:
    write_job(veri_home, "20261129-210000-cccc")
    write_job(veri_home, "20261129-220000-dddd", status="failed", steps=2, error=DATA_ERROR)
    app = create_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+b")
        await _settle(pilot)
        assert isinstance(app.screen, JobsScreen)
        table = app.screen.query_one(DataTable)
        assert table.row_count == 2
        assert table.get_row_at(0)[:2] == ["20261129-220000-dddd", "failed DATA_ERROR"]
        await pilot.press("down", "enter")
        await _settle(pilot)
        assert isinstance(app.screen, MonitorScreen)
        assert app.screen.job_id == "20261129-210000-cccc"
        await pilot.press("d")
        assert isinstance(app.screen, JobsScreen)


def test_metric_lines_and_durations() -> None:
    assert metric_of('{"step": 3, "total_steps": 9, "loss": 1.5}')["step"] == 3
    assert metric_of("plan: dp=2") is None
    assert metric_of('{"not": "a metric"}') is None
    assert metric_of("{broken") is None
    assert (fmt_duration(42), fmt_duration(62), fmt_duration(3720)) == ("42s", "1m02s", "1h02m")
