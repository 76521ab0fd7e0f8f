"""The start screen and its helper: the helper process plans the opening job while Textual
starts, and its answer is the editor's own model and plan line.

Whether the helper's line reaches the screen before the editor replaces it is a race by
design (a slow helper never delays the editor), so the first test checks the answer
itself against the editor's lines, and the second that a line shown is the editor's.
"""

from __future__ import annotations

import asyncio

import pytest
from app_helpers import editor_ready

from veri_tui.app import create_app, first_plan
from veri_tui.app.screens.start import StartScreen


async def editor_lines(pilot) -> tuple[str, str]:
    await editor_ready(pilot)
    screen = pilot.app.screen
    return str(screen.query_one("#model-line").render()), str(
        screen.query_one("#plan-line").render()
    )


async def test_the_helpers_answer_is_the_editors_model_and_plan_line(
    veri_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    answer = first_plan.result(first_plan.spawn(None), timeout=60)
    assert answer is not None
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")  # the editor on its own
    async with create_app().run_test(size=(120, 40)) as pilot:
        model_line, plan_line = await editor_lines(pilot)
    assert answer == {"model_line": model_line, "plan_line": plan_line}
    assert plan_line.startswith("plan: dp=1 ")


async def test_with_the_helper_the_app_opens_the_editor_and_a_shown_line_is_its_own(
    veri_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    app = create_app()
    assert app.first_plan is not None  # started before Textual was imported
    async with app.run_test(size=(120, 40)) as pilot:
        start = app.screen
        while not isinstance(start, StartScreen):
            await asyncio.sleep(0.005)
            start = app.screen
        _, plan_line = await editor_lines(pilot)
    assert app.first_plan.wait(timeout=60) == 0
    assert start.shown_plan_line in ("", plan_line)


def test_a_helper_that_cannot_plan_gives_no_line(veri_home, monkeypatch) -> None:
    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    assert first_plan.result(first_plan.spawn(str(veri_home / "no-such-model"))) is None
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")
    assert first_plan.spawn(None) is None
