"""The start screen and its helper: the helper process plans the opening job while Textual
starts, and its answer is the editor's own model and plan line.

The app also plans the opening job itself once the editor's module is imported, and the
start screen shows whichever line comes first: with or without the helper, the line shown
is the editor's own.
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


async def test_with_the_helper_the_start_screen_shows_the_editors_plan_line(
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
    assert app.first_plan.wait(timeout=60) in (0, -9)  # done, or stopped once not needed
    assert start.shown_plan_line == plan_line


async def test_without_the_helper_the_start_screen_shows_the_apps_own_plan(veri_home) -> None:
    app = create_app()  # VERI_FIRST_PLAN=0
    assert app.first_plan is None
    async with app.run_test(size=(120, 40)) as pilot:
        start = app.screen
        while not isinstance(start, StartScreen):
            await asyncio.sleep(0.005)
            start = app.screen
        _, plan_line = await editor_lines(pilot)
    assert start.shown_plan_line == plan_line


def test_a_helper_that_cannot_plan_gives_no_line(veri_home, monkeypatch) -> None:
    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    assert first_plan.result(first_plan.spawn(str(veri_home / "no-such-model"))) is None
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")
    assert first_plan.spawn(None) is None


async def test_a_later_start_shows_the_remembered_plan_line_in_its_first_frame(
    veri_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    assert first_plan.cached(None) is None  # nothing planned yet in this VERI_HOME
    async with create_app().run_test(size=(120, 40)) as pilot:
        _, plan_line = await editor_lines(pilot)
    assert first_plan.cached(None)["plan_line"] == plan_line  # remembered by the first start
    app = create_app()
    assert app.first_plan is None  # no helper: nothing to plan before the first frame
    start = StartScreen(None, None, app.remembered)
    assert start.shown_plan_line == plan_line
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")
    assert first_plan.cached(None) is None  # the switch turns the cache off too


def test_the_remembered_line_is_forgotten_when_the_model_changes(
    veri_home, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.setenv("VERI_FIRST_PLAN", "1")
    model = tmp_path / "model"
    shutil.copytree(first_plan._BUNDLED, model)
    first_plan.remember(str(model), {"model_line": "m", "plan_line": "plan: dp=1 old"})
    assert first_plan.cached(str(model)) == {"model_line": "m", "plan_line": "plan: dp=1 old"}
    config = model / "config.json"
    config.write_text(config.read_text().replace("}", ', "note": 1}', 1))
    assert first_plan.cached(str(model)) is None  # a file in the model's folder changed
    assert first_plan.cache_key("org/hub-id") is None  # a Hub id: no key from stat alone


async def test_a_key_typed_before_the_editor_opens_is_kept(
    veri_home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ctrl+o typed while the start screen shows (right as the first frame appears) opens
    the model picker once the editor is there; the app's own keys (ctrl+t) run at once."""
    import threading

    from veri_tui.app.screens.model_picker import ModelPickerScreen
    from veri_tui.app.screens.plan_editor import PlanEditorScreen

    gate = threading.Event()
    real = first_plan.plan_answer

    def gated(model: str | None) -> dict[str, str] | None:
        gate.wait(timeout=60)  # the start screen stays until the keys are typed
        return real(model)

    monkeypatch.setattr(first_plan, "plan_answer", gated)
    app = create_app()  # VERI_FIRST_PLAN=0: the start screen plans the opening job itself
    async with app.run_test(size=(120, 40)) as pilot:
        while not isinstance(app.screen, StartScreen) or not app.screen.is_mounted:
            await asyncio.sleep(0.005)
        theme = app.theme
        await pilot.press("ctrl+o", "ctrl+t")
        assert isinstance(app.screen, StartScreen)
        assert app.theme != theme  # ran at once
        gate.set()
        for _ in range(1200):
            if isinstance(app.screen, ModelPickerScreen):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, ModelPickerScreen)
        assert isinstance(app.screen_stack[-2], PlanEditorScreen)
