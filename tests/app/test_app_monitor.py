"""Run monitor and jobs screen, fed from job folders written by the test (no trainer)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from app_helpers import DATA_ERROR, PLAN_LINE, editor_ready, until, write_job
from textual.widgets import DataTable, Log, ProgressBar, Static

from veri_tui.app import create_app
from veri_tui.app.screens.jobs import JobsScreen
from veri_tui.app.screens.monitor import MonitorScreen, fmt_duration
from veri_tui.app.widgets.charts import LossChart
from veri_tui.app.widgets.failure_panel import FailurePanel
from veri_tui.launch import jobs


async def _settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def _monitor(pilot, job_id: str, ended: bool = True) -> MonitorScreen:
    """Open the monitor on ``job_id`` from the editor; an ended job is followed to its end."""
    await editor_ready(pilot)
    pilot.app.open_monitor(job_id)
    await (_settle(pilot) if ended else pilot.pause())
    assert isinstance(pilot.app.screen, MonitorScreen)
    return pilot.app.screen


async def test_monitor_shows_finished_job(veri_home: Path) -> None:
    write_job(veri_home, "20261129-220000-aaaa")
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-220000-aaaa")
        assert str(screen.query_one("#mon-plan", Static).render()) == PLAN_LINE
        status = str(screen.query_one("#mon-status", Static).render())
        assert "status succeeded" in status and "step 20/20" in status and "took 1m02s" in status
        bar = screen.query_one(ProgressBar)
        assert (bar.progress, bar.total) == (20, 20)
        assert len(screen.query_one(LossChart).points) == 20
        assert "loss" in str(screen.query_one(LossChart).render())
        log = screen.query_one(Log)
        assert log.line_count == 24  # 4 header lines + 20 metric lines
        # Metric lines read as rows, not raw JSON cut at the edge; other lines as they are.
        assert log.lines[3] == PLAN_LINE
        assert log.lines[4] == "step 1/20  loss 3.2  lr 1.0e-04  grad 1  1,000 tok/s  mem 0.0 GB"
        assert not any(line.startswith("{") for line in log.lines)
        assert "DPO" not in str(screen.query_one(LossChart).render())  # no margins: loss only
        assert not screen.query_one(FailurePanel).display


async def test_monitor_failure_panel(veri_home: Path) -> None:
    write_job(veri_home, "20261129-220000-bbbb", status="failed", steps=3, error=DATA_ERROR)
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-220000-bbbb")
        panel = screen.query_one(FailurePanel)
        assert panel.display
        text = str(panel.render())
        assert "code DATA_ERROR" in text and "attribution customer" in text
        assert "rank 1/2 (node 0, local_rank 1)" in text
        # A data error's summary names the file and line: the panel says it once and points
        # to the traceback in the job folder instead of showing it (issue 27).
        assert text.count("sft.jsonl line 7") == 1 and "Traceback" not in text
        assert "traceback: traceback.txt in the job folder" in text
        oom = {**DATA_ERROR, "code": "CUDA_OOM", "summary": "rank 1/2 (...) failed: OOM"}
        panel.error = oom
        assert "Traceback" in str(panel.render())  # other failures keep their traceback


async def test_eval_loss_in_the_chart_and_in_jobs_job(veri_home: Path, capsys) -> None:
    write_job(veri_home, "20261129-220000-eeee", steps=20, eval_steps=5)
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-220000-eeee")
        chart = screen.query_one(LossChart)
        await until(pilot, lambda: len(chart.evals) == 4, "eval points")
        assert [s for s, _ in chart.evals] == [5, 10, 15, 20]
        await until(pilot, lambda: "loss vs step" in str(chart.render()), "the chart drawn")
        drawn = str(chart.render())
        assert "loss vs step (E: eval_loss)" in drawn and drawn.count("E") >= 2  # the markers
    from veri_tui.cli import main

    assert main(["jobs", "20261129-220000-eeee"]) == 0
    out = capsys.readouterr().out
    assert "eval_loss: 1.204 at step 20/20 (train loss 0.8647; 4 evals: " in out


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


def test_durations() -> None:
    assert (fmt_duration(42), fmt_duration(62), fmt_duration(3720)) == ("42s", "1m02s", "1h02m")


def _set_status(folder: Path, status: str) -> None:
    record = json.loads((folder / "job.json").read_text())
    (folder / "job.tmp").write_text(json.dumps(dict(record, status=status)))
    os.replace(folder / "job.tmp", folder / "job.json")


async def test_monitor_follows_a_running_job_to_its_end(veri_home: Path) -> None:
    # A running job whose "supervisor" is this test process: the monitor follows its log by
    # offset (every line once, a last line without newline too) and stops when it ends.
    folder = write_job(veri_home, "20261129-230000-eeee", status="running", steps=0)
    (folder / "supervisor.pid").write_text(str(os.getpid()))
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-230000-eeee", ended=False)
        log = screen.query_one(Log)
        await until(pilot, lambda: log.line_count == 4, "the header lines")
        assert "status running" in str(screen.query_one("#mon-status", Static).render())
        with (folder / "log.txt").open("a") as fh:
            fh.write('{"step": 1, "total_steps": 2, "loss": 2.5}\nsaving...\npartial')
        await until(pilot, lambda: log.line_count == 6, "the new complete lines")
        with (folder / "log.txt").open("a") as fh:
            fh.write(" line\nlast, no newline")
        _set_status(folder, "succeeded")
        await until(pilot, lambda: screen.status == "succeeded", "the end")
        await pilot.app.workers.wait_for_complete()  # the watcher ended with the job
        await pilot.pause()
        assert log.lines[4:] == [
            "step 1/2  loss 2.5",
            "saving...",
            "partial line",
            "last, no newline",
        ]
        assert screen.query_one(LossChart).points == ((1, 2.5),)


async def test_detach_stops_following_a_running_job(veri_home: Path, monkeypatch) -> None:
    folder = write_job(veri_home, "20261129-230000-ffff", status="running", steps=1)
    (folder / "supervisor.pid").write_text(str(os.getpid()))
    ended = threading.Event()
    real_watch = jobs.watch

    def watch(*args, **kwargs):
        try:
            yield from real_watch(*args, **kwargs)
        finally:
            ended.set()

    monkeypatch.setattr(jobs, "watch", watch)
    app = create_app()
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            monitor = await _monitor(pilot, "20261129-230000-ffff", ended=False)
            await until(pilot, lambda: monitor.query_one(Log).line_count == 5, "the log")
            await pilot.press("d")
            # The job still runs; the closed monitor's watcher must end without waiting for it
            # (a thread left behind would also hold the app's exit until the job ends).
            await until(pilot, ended.is_set, "the watcher ending after detach")
            assert json.loads((folder / "job.json").read_text())["status"] == "running"
    finally:
        _set_status(folder, "succeeded")  # never leave a watcher waiting on this job


async def test_dpo_reward_margin_is_charted_beside_the_loss(veri_home: Path) -> None:
    folder = write_job(veri_home, "20261129-230000-gggg", steps=6, total=6)
    lines = []
    for line in (folder / "log.txt").read_text().splitlines():
        if line.startswith('{"step"'):
            metric = json.loads(line)
            margin = 0.1 * metric["step"]
            metric.update({"rewards/chosen": -1.0 + margin, "rewards/rejected": -1.0})
            metric.update({"rewards/margins": margin, "rewards/accuracies": 0.5})
            line = json.dumps(metric)
        lines.append(line)
    (folder / "log.txt").write_text("\n".join(lines) + "\n")
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-230000-gggg")
        chart = screen.query_one(LossChart)
        await until(pilot, lambda: "loss vs step" in str(chart.render()), "the chart drawn")
        assert [round(m, 6) for _, m in chart.margins] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
        drawn = str(chart.render())
        assert "loss vs step" in drawn and "DPO reward margin vs step" in drawn
        assert "margin 0.6  acc 0.50" in screen.query_one(Log).lines[-1]


async def test_monitor_sets_measured_beside_predicted_once_ended(veri_home: Path) -> None:
    folder = write_job(veri_home, "20261129-220000-mmmm")
    record = json.loads((folder / "job.json").read_text())
    record["predicted"] = {"gpu": "L4-24GB", "states_bytes": 1e9, "peak_bytes": 2e9,
                           "tokens_per_s": 4000.0, "step_time_s": 1.0}  # fmt: skip
    record["measured"] = {"device": "cuda", "gpu": "L4-24GB", "ranks": 2, "states_bytes": 1e9,
                          "peak_bytes": 3e9, "peak_source": "cuda_max_allocated",
                          "tokens_per_s": 2000.0, "step_time_s": 2.0, "steps_timed": 18,
                          "warmup_steps": 2}  # fmt: skip
    (folder / "job.json").write_text(json.dumps(record))
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitor(pilot, "20261129-220000-mmmm")
        box = screen.query_one("#mon-measured", Static)
        assert box.display
        rows = str(box.render()).splitlines()
        assert rows[2].split() == ["peak", "memory/GPU", "2.00", "GB", "3.00", "GB", "1.5x"]
        assert rows[3].split()[-1] == "0.5x" and "measured on L4-24GB x2" in rows[-1]
