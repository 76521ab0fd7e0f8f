"""Snapshots of the plan editor and the run monitor at 120x40 and 80x24.

The editor shows the bundled tiny model with fixed knobs; the monitor shows a job folder
written by the test (fixed timestamps and losses), so every frame is reproducible.
Update after an intended change with `pytest tests/app --snapshot-update`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from app_helpers import DATA_ERROR, editor_ready, write_job
from textual.widgets import Input

from veri_tui.app import create_app

SIZES = [(120, 40), (80, 24)]


async def _settled(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=["120x40", "80x24"])
def test_plan_editor_snapshot(snap_compare, veri_home: Path, size: tuple[int, int]) -> None:
    async def edit(pilot) -> None:
        await editor_ready(pilot)
        pilot.app.screen.query_one("#knob-gpu_count", Input).value = "4"
        await pilot.pause()

    assert snap_compare(create_app(), terminal_size=size, run_before=edit)


@pytest.mark.parametrize("size", SIZES, ids=["120x40", "80x24"])
def test_run_monitor_snapshot(snap_compare, veri_home: Path, size: tuple[int, int]) -> None:
    write_job(veri_home, "20261129-220000-eeee", status="failed", steps=12, error=DATA_ERROR)

    async def open_monitor(pilot) -> None:
        await editor_ready(pilot)
        pilot.app.open_monitor("20261129-220000-eeee")
        await pilot.pause()
        await _settled(pilot)

    assert snap_compare(create_app(), terminal_size=size, run_before=open_monitor)


def test_plan_editor_fields_in_error_snapshot(snap_compare, veri_home: Path) -> None:
    """Several fields in error at once: each message wraps under its field, the next field
    right below it (a pilot test checks every field: test_app_field_errors.py)."""

    async def errors(pilot) -> None:
        await editor_ready(pilot)
        for key, text in (
            ("gpu_count", "-1"),
            ("micro_batch_size", "8x"),
            ("learning_rate", "abc"),
            ("max_steps", "0"),
        ):
            pilot.app.screen.query_one(f"#knob-{key}", Input).value = text
        await pilot.pause()
        await _settled(pilot)

    assert snap_compare(create_app(), terminal_size=(120, 40), run_before=errors)


def test_plan_editor_light_theme_snapshot(snap_compare, veri_home: Path) -> None:
    async def ready(pilot) -> None:
        await editor_ready(pilot)

    app = create_app(theme="textual-light")
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)
