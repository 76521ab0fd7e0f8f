"""The model picker as a new user meets it: typing goes to the path field, arrows to the list."""

from __future__ import annotations

from pathlib import Path

from app_helpers import editor_ready, write_big_model
from textual.widgets import Input, OptionList, Static

from veri_tui.app import create_app
from veri_tui.app.screens.model_picker import ModelPickerScreen, describe
from veri_tui.app.screens.plan_editor import PlanEditorScreen
from veri_tui.plan import read_model_info


async def _open_picker(pilot) -> ModelPickerScreen:
    await editor_ready(pilot)
    await pilot.press("ctrl+o")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    picker = pilot.app.screen
    assert isinstance(picker, ModelPickerScreen)
    return picker


async def _plan_ready(pilot) -> PlanEditorScreen:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    editor = pilot.app.screen
    assert isinstance(editor, PlanEditorScreen)
    return editor


async def test_typed_path_is_planned(veri_home: Path, tmp_path: Path) -> None:
    model = write_big_model(tmp_path / "my-model_v2", layers=2, hidden=256)
    app = create_app()
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _open_picker(pilot)
        assert picker.focused is picker.query_one("#model-input", Input)
        await pilot.press(*str(model), "enter")  # typed key by key, as a user would
        editor = await _plan_ready(pilot)
        assert editor.model == str(model)
        assert editor.record is not None
        count = read_model_info(str(model)).parameter_count
        shown = str(editor.query_one("#model-line", Static).render())
        assert shown == f"model {model}: {count:,} parameters"
        assert str(editor.query_one("#plan-line", Static).render()).startswith("plan: dp=1")
        assert app.recent_models()[0] == str(model)


async def test_arrows_move_the_list_and_enter_takes_it(veri_home: Path, tmp_path: Path) -> None:
    recent = write_big_model(tmp_path / "recent-model", layers=1, hidden=64)
    app = create_app()
    app.remember_model(str(recent))  # the list: the two bundled models, recent-model
    async with app.run_test(size=(100, 30)) as pilot:
        picker = await _open_picker(pilot)
        olist = picker.query_one(OptionList)
        shown = [str(olist.get_option_at_index(i).prompt) for i in range(olist.option_count)]
        # The bundled mixture of experts beside the bundled tiny model (it was not listed).
        assert shown == ["bundled  tiny-model", "bundled  tiny-moe (mixture of experts)",
                         f"recent   {recent}"]  # fmt: skip
        assert olist.highlighted == 0
        await pilot.press("down", "down")
        assert olist.highlighted == 2
        assert picker.focused is picker.query_one("#model-input", Input)
        await pilot.press("enter")  # nothing typed: the highlighted model
        editor = await _plan_ready(pilot)
        assert editor.model == str(recent)
        assert editor.record is not None


def test_the_model_picker_names_the_experts() -> None:
    moe_lines = describe(read_model_info("assets/tiny-moe")).splitlines()
    assert (
        moe_lines[1] == "experts 8 routed, 2 per token, 0 shared; active 119,680 (0.00B) per token"
    )
    assert not describe(read_model_info("assets/tiny-model")).splitlines()[1].startswith("experts")
