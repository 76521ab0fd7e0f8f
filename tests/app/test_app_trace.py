"""The plan editor's Trace (beside Launch): the bundled trainer's own step on fake CUDA in a
child process, its line and phase table shown under the buttons; an edit hides it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from app_helpers import editor_ready, pilot_wait
from textual.widgets import Button, Input, Static

from veri_tui.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]
LINE = re.compile(r"trace: peak \d+\.\d GB allocated per GPU \(1 fake ranks, \d+ s\) vs plan "
                  r"\d+\.\d GB \([+-]\d+\.\d%\)")  # fmt: skip


async def test_trace_shows_the_trainer_s_peak_beside_the_plan(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = pilot.app.screen
        view = screen.query_one("#trace-view", Static)
        assert not view.display and not screen.query_one("#trace", Button).disabled
        await pilot.press("ctrl+g")
        await pilot_wait(pilot, lambda: "vs plan" in str(view.render()), 120, "the trace")
        text = str(view.render())
        assert LINE.match(text.splitlines()[0]), text
        for phase in ("load", "forward", "backward", "optimizer step", "checkpoint"):
            assert re.search(rf"^\s+{phase}\s+\d", text, re.M), text
        screen.query_one("#knob-micro_batch_size", Input).value = "2"  # another job now
        await pilot_wait(pilot, lambda: not view.display, 10, "the trace hidden")
