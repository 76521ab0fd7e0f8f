"""The launch screen's dataset and output fields start with the editor's values, so the
preflight checks what the screen shows (it showed the placeholder while the preflight used
the editor's file); emptied, a field means its default (the bundled sample)."""

from __future__ import annotations

import shutil
from pathlib import Path

from app_helpers import editor_ready, pilot_wait
from textual.widgets import Input, Static

from veri_tui.app import create_app
from veri_tui.app.screens.launch import LaunchScreen

REPO = Path(__file__).resolve().parents[2]


async def test_the_launch_screen_shows_the_editors_dataset(veri_home: Path, tmp_path: Path) -> None:
    data = Path(shutil.copy(REPO / "assets" / "data" / "sft.jsonl", tmp_path / "mine.jsonl"))
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        # Pasted whole: the editor counts the tokens of what the field holds.
        app.screen.query_one("#knob-dataset", Input).value = str(data)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.press("ctrl+l")
        await pilot_wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch")
        screen = app.screen
        assert screen.query_one("#dataset", Input).value == str(data)
        assert screen.job_fields()["dataset"] == str(data)
        shown = lambda: str(screen.query_one("#preflight", Static).render())  # noqa: E731
        await pilot_wait(pilot, lambda: screen.ready, 90, "the preflight to pass")
        row = next(line for line in shown().splitlines() if " dataset:" in line)
        assert row.startswith("ok ") and "mine.jsonl" in row, row

        # Emptied: the bundled sample, as the hint says; checked on Enter.
        screen.query_one("#dataset", Input).value = ""
        await pilot.pause()
        assert "dataset" not in screen.job_fields()
        screen.query_one("#dataset", Input).focus()
        await pilot.press("enter")
        await pilot_wait(pilot, lambda: screen.ready, 90, "the preflight to pass again")
        row = next(line for line in shown().splitlines() if " dataset:" in line)
        assert row.startswith("ok ") and "mine.jsonl" not in row, row
