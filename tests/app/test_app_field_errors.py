"""A field in error in the plan editor: its message wraps under the field at the form's
width and the next field follows right below it, for every input of the form.

Before the fix an error row was measured at one grid column's width (Textual's grid sizes an
`auto` row per column, also for a cell spanning both): `-1` in gpu_count left ~26 blank rows
before the next field and `8x` in micro_batch_size ~79, every later field off screen. The
snapshot of several fields in error is in test_app_snapshots.py.
"""

from __future__ import annotations

from pathlib import Path

from app_helpers import editor_ready, type_into
from rich.console import Console
from rich.text import Text
from textual.widget import Widget
from textual.widgets import Input, Select, Static

from veri_tui.app import create_app
from veri_tui.app.widgets.knob_fields import FIELDS
from veri_tui.app.widgets.knob_form import KnobForm
from veri_tui.app.widgets.memory_bar import MemoryBar

# The dataset's problems are the dataset's (a missing file, a bad row): the cost line and
# the launch preflight say them, not a parse error beside the field.
NOT_TYPED = {"dataset"}


def _next_row(screen, key: str) -> Widget:
    """The first row shown after `key`'s error: the next visible label or section title."""
    grid = screen.query_one("#knob-grid")
    children = list(grid.children)
    after = children[children.index(screen.query_one(f"#err-{key}")) + 1 :]
    return next(w for w in after if w.display and "field-error" not in w.classes)


def _lines(text: str, width: int) -> int:
    """How many lines `text` takes wrapped at `width` cells."""
    return len(Text(text).wrap(Console(width=width), width))


async def _check_every_input(pilot, method: str) -> list[str]:
    screen = pilot.app.screen
    form = screen.query_one(KnobForm)
    checked = []
    for spec in FIELDS:
        label = screen.query_one(f"#label-{spec.key}")
        if spec.widget != "input" or spec.key in NOT_TYPED or not label.display:
            continue
        inp = screen.query_one(f"#knob-{spec.key}", Input)
        inp.value = "8x"  # typing each key is test_the_first_reported_cases' job
        await pilot.pause()
        err = screen.query_one(f"#err-{spec.key}", Static)
        message = str(err.render())
        assert "8x" in message, (method, spec.key, message)
        width = err.region.width - err.styles.gutter.width
        assert err.region.height == _lines(message, width) <= 5, (spec.key, err.region)
        after = _next_row(screen, spec.key)
        assert after.region.y == err.region.bottom, (spec.key, err.region, after.region)
        form.scroll_to_widget(label, top=True, animate=False)
        await pilot.pause()
        assert form.scrollable_content_region.contains_region(after.region), spec.key
        inp.value = ""
        await pilot.pause()
        assert not err.display, spec.key
        checked.append(spec.key)
    return checked


async def test_every_fields_error_keeps_the_next_field_in_view(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await editor_ready(pilot)
        checked = await _check_every_input(pilot, "sft_text")
        assert {"gpu_count", "micro_batch_size", "learning_rate", "eval_steps"} <= set(checked)
        app.screen.query_one("#knob-method", Select).value = "dpo"
        await pilot.pause()
        checked += await _check_every_input(pilot, "dpo")
        # Every input of the form, the dpo-only ones (beta, max_length) included.
        inputs = {s.key for s in FIELDS if s.widget == "input"} - NOT_TYPED
        assert set(checked) == inputs


async def test_the_first_reported_cases(veri_home: Path) -> None:
    """The issue's two: -1 in gpu_count (was ~26 blank rows), 8x in micro_batch_size (~79)."""
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        for key, text, expected in (
            ("gpu_count", "-1", "gpu_count must be at least 1 (got -1)"),
            # In plain words naming the field, not pydantic's "Input should be a valid
            # integer, unable to parse string as an integer".
            ("micro_batch_size", "8x", "micro_batch_size must be a whole number (got '8x')"),
            ("max_steps", "0", "max_steps must be at least 1 (got '0')"),  # as typed
            ("eval_fraction", "2", "eval_fraction must be at most 0.9 (got '2')"),
            ("lora_rank", "1.5", "lora_rank must be a whole number (got '1.5')"),
        ):
            await type_into(pilot, f"#knob-{key}", text)
            err = screen.query_one(f"#err-{key}")
            assert expected in str(err.render())
            # No plan is coming until the field is fixed: the bar says so (it said "waiting").
            bar = str(screen.query_one(MemoryBar).render())
            assert bar == "memory: none while the plan is refused (fix the marked fields)"
            assert 1 <= err.region.height <= 5
            assert _next_row(screen, key).region.y == err.region.bottom
            await type_into(pilot, f"#knob-{key}", "")
