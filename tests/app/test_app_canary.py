"""The launch screen's Canary button, driven with Textual's pilot through the real launcher
and trainer (2 CPU processes): a bad limit is one error, then the canary runs, its table
reaches the monitor's log tail, and the gate's go lets the same job finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_helpers import editor_ready
from app_helpers import pilot_wait as _wait
from app_helpers import type_into as _type
from textual.widgets import Button, Log

from veri_tui.app import create_app
from veri_tui.app.screens.launch import LaunchScreen
from veri_tui.app.screens.monitor import MonitorScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(200)]


async def test_canary_button_runs_the_gate_and_the_job_goes_on(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await _type(pilot, "#knob-gpu_count", "2")
        await _type(pilot, "#knob-max_steps", "5")
        await pilot.press("ctrl+l")
        await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
        await _wait(pilot, lambda: app.screen.ready, 90, "preflight to pass")
        screen = app.screen
        assert not screen.query_one("#canary", Button).disabled
        await _type(pilot, "#canary-max_cost", "lots")
        await pilot.click("#canary")
        await pilot.pause()
        assert isinstance(app.screen, LaunchScreen)  # refused before anything started
        assert not (veri_home / "jobs").exists() or not any((veri_home / "jobs").iterdir())
        await _type(pilot, "#canary-max_cost", "1000")
        await pilot.click("#canary")
        await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 60, "the monitor")
        monitor = app.screen
        await _wait(pilot, lambda: monitor.status == "succeeded", 150, "the job to succeed")
        await pilot.pause(0.5)
        lines = list(monitor.query_one("#log-tail", Log).lines)
        assert any(ln.startswith("canary: 3 steps on cpu x2") for ln in lines), lines
        assert any(ln.startswith("canary: go (max cost $1000") for ln in lines), lines
        (job_dir,) = (veri_home / "jobs").iterdir()
        record = json.loads((job_dir / "job.json").read_text())
        assert record["spec"]["canary"] == {"steps": 3, "max_cost": 1000.0}
        assert record["canary"]["decision"] == "go" and record["status"] == "succeeded"
