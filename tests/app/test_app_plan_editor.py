"""The plan editor against the real planning core and the bundled tiny model."""

from __future__ import annotations

from pathlib import Path

from app_helpers import editor_ready, settle, write_big_model
from textual import events
from textual.widgets import Button, Input, OptionList, Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.model_picker import ModelPickerScreen
from veri_tui.app.screens.plan_editor import PlanEditorScreen
from veri_tui.app.widgets.charts import ThroughputChart
from veri_tui.app.widgets.memory_bar import MemoryBar


def _plan_line(screen) -> str:
    return str(screen.query_one("#plan-line", Static).render())


def _error(screen, key: str) -> str:
    return str(screen.query_one(f"#err-{key}", Static).render())


async def _type(pilot, key: str, text: str) -> None:
    """Clear an input and type into it with the keyboard, as a user would."""
    inp = pilot.app.screen.query_one(f"#knob-{key}", Input)
    inp.focus()
    inp.value = ""
    await pilot.press(*text)
    await pilot.pause()


async def test_opens_on_bundled_model_and_replans_as_you_type(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        assert isinstance(screen, PlanEditorScreen)
        assert "tiny-model (bundled)" in str(screen.query_one("#model-line", Static).render())
        assert _plan_line(screen).startswith("plan: dp=1 zero_stage=0 ")
        assert screen.query_one(MemoryBar).record is not None
        assert screen.query_one(ThroughputChart).sweep
        assert not screen.query_one("#launch", Button).disabled

        screen.query_one("#knob-gpu", Select).value = "L4-24GB"
        await _type(pilot, "gpu_count", "4")
        assert _plan_line(screen).startswith("plan: dp=4 zero_stage=0 ")
        assert "gbs=4" in _plan_line(screen)

        screen.query_one("#knob-zero_stage", Select).value = "1"
        await pilot.pause()
        assert "ZeRO-1 is not available; use zero_stage 2" in _error(screen, "zero_stage")
        assert screen.query_one("#err-zero_stage").has_class("-shown")
        assert screen.query_one("#launch", Button).disabled
        assert _plan_line(screen).startswith("plan refused")
        await pilot.press("ctrl+l")  # refused: stays on the editor
        assert isinstance(app.screen, PlanEditorScreen)
        # A value that does not parse does not hide the other fields' refusals.
        await _type(pilot, "learning_rate", "abc")
        assert _error(screen, "learning_rate") == "learning_rate must be a number (got 'abc')"
        assert "ZeRO-1 is not available" in _error(screen, "zero_stage")
        assert _plan_line(screen).startswith("plan refused: 2 errors")
        await _type(pilot, "learning_rate", "")

        screen.query_one("#knob-zero_stage", Select).value = "3"
        await pilot.pause()
        assert not screen.query_one("#err-zero_stage").has_class("-shown")
        assert not screen.query_one("#launch", Button).disabled
        assert "zero_stage=3" in _plan_line(screen) and "(requested:" in _plan_line(screen)


async def test_data_parallel_rule_and_pin(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        await _type(pilot, "gpu_count", "2")
        await _type(pilot, "data_parallel_size", "3")
        assert "TP*CP*DP*PP=3 != WORLD_SIZE=2" in _error(screen, "data_parallel_size")
        await _type(pilot, "data_parallel_size", "")
        assert not _error(screen, "data_parallel_size")
        auto_line = _plan_line(screen)
        assert "(auto:" in auto_line
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert screen.query_one("#knob-data_parallel_size", Input).value == "2"
        assert screen.query_one("#knob-zero_stage", Select).value == "0"
        assert _plan_line(screen) == auto_line.replace("(auto:", "(requested:")
        # Pinned batch knobs (grad_acc=1, gbs=2): the sweep keeps gbs=2, so it draws 1 and 2
        # GPUs and says why 4 and 8 are not drawn.
        await settle(pilot)
        chart = screen.query_one(ThroughputChart)
        assert sorted({r["gpu_count"] for r in chart.sweep if r["known"]}) == [1, 2]
        shown = str(chart.render())
        assert "not drawn at 4, 8 GPUs: global_batch_size 2 is not a multiple" in shown


async def test_suggestion_applied_with_one_key(veri_home: Path, tmp_path: Path) -> None:
    big = write_big_model(tmp_path / "big-model")
    app = create_app(model=str(big))
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        record = screen.record
        assert record is not None and not record.fits
        assert record.suggestions
        text = str(screen.query_one("#suggestions", Static).render())
        first = record.suggestions[0]
        assert first.text in text
        trace = str(screen.query_one("#decision-trace", Static).render()).splitlines()
        # The header's decision line once, then the rest of the trace (why it does not fit).
        decision = record.resolved_parallelism["decision_trace"][0]
        assert [line for line in trace if decision in line] == [f"decision: {decision}"]
        assert trace[-1].startswith("  does not fit: ")
        await pilot.press("ctrl+y")
        await pilot.pause()
        for key, value in first.set.items():
            widget = screen.query_one(f"#knob-{key}")
            assert str(widget.value).lower() == str(value).lower()
        assert screen.record is not None
        assert screen.record.states_bytes_per_gpu == first.states_bytes_per_gpu


async def test_header_shows_the_decision_once(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        trace = str(screen.query_one("#decision-trace", Static).render()).splitlines()
        assert trace == screen.record.header_lines  # a plan that fits: nothing after it
        assert sum("stage-0 states" in line for line in trace) == 1
        assert trace[-1].startswith("decision: stage-0 states ")


async def test_placeholders_are_short_hints_and_focus_shows_the_full_help(
    veri_home: Path,
) -> None:
    from veri_tui.plan import Hyperparameters

    app = create_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        placeholders = {i.id: i.placeholder for i in screen.query(Input)}
        assert placeholders["knob-micro_batch_size"] == "default 1"
        assert placeholders["knob-gradient_accumulation_steps"] == "auto"
        assert placeholders["knob-max_seq_length"] == "2048 tokens"
        assert placeholders["knob-warmup_steps"] == "0 steps"
        for inp in screen.query(Input):  # none is cut at the editor's narrowest width
            if inp.display:
                assert len(inp.placeholder) <= inp.content_region.width, inp.id
        help_line = screen.query_one("#knob-help", Static)
        assert not help_line.display
        await pilot.click("#knob-micro_batch_size")
        await pilot.pause()
        described = Hyperparameters.knob_table["micro_batch_size"].description
        assert described == "samples per GPU per forward/backward (alias: batch_size)"
        assert help_line.display
        assert str(help_line.render()) == f"micro_batch_size: {described}"
        assert help_line.region.height == 2  # wrapped, not cut
        await pilot.press("tab")  # the next field, by keyboard
        await pilot.pause()
        assert app.focused is screen.query_one("#knob-gradient_accumulation_steps")
        assert "micro-batches per optimizer step" in str(help_line.render())
        screen.query_one("#pin", Button).focus()  # out of the form: no stale help
        await pilot.pause()
        assert not help_line.display


async def test_export_writes_a_toml_that_plans_the_same(veri_home: Path, tmp_path: Path) -> None:
    from veri_tui.plan import job_to_toml, load_job_config, plan_job, read_model_info

    app = create_app(workdir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await _type(pilot, "gpu_count", "2")
        await _type(pilot, "lora_rank", "8")
        line = _plan_line(app.screen)
        await pilot.press("ctrl+s")
        await pilot.pause()
    job = load_job_config(tmp_path / "veri.toml")
    assert plan_job(job, read_model_info(job.model)).plan_line == line
    assert (tmp_path / "veri.toml").read_text() == job_to_toml(job)  # the core's writer
    assert not list(tmp_path.glob(".veri.toml.*"))


async def test_model_picker(veri_home: Path, tmp_path: Path) -> None:
    big = write_big_model(tmp_path / "big-model", layers=2)
    # A complete snapshot in the (test's own) HF cache is offered as `org/name`.
    repo = tmp_path / "hf-cache" / "models--acme--tiny-llama"
    write_big_model(repo / "snapshots" / "abc123", layers=1, hidden=64)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    app = create_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+o")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ModelPickerScreen)
        options = picker.query_one(OptionList)
        ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
        assert ids[2:] == ["acme/tiny-llama"] and ids[0].endswith("tiny-model")
        assert ids[1].endswith("tiny-moe")  # the bundled mixture of experts too
        details = str(picker.query_one("#model-details", Static).render())
        assert "Qwen3ForCausalLM" in details and "parameters" in details
        inp = picker.query_one("#model-input", Input)
        inp.focus()
        inp.value = "nobody/no-such-model"
        await pilot.press("enter")
        await settle(pilot)
        assert "HF_HUB_OFFLINE" in str(picker.query_one("#model-details", Static).render())
        inp.value = str(big)
        await pilot.press("enter")
        await settle(pilot)
        editor = app.screen
        assert isinstance(editor, PlanEditorScreen)
        assert editor.model == str(big)
        assert editor.record is not None
        assert app.recent_models()[0] == str(big)


async def test_theme_toggle_and_palette_entries(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Launch", "Pin resolved plan", "Export veri.toml", "Pick model", "Jobs"):
            assert title in titles


async def test_quick_backspace_and_digit_keys_apply_in_the_order_typed(veri_home: Path) -> None:
    """Keys as a driver delivers them, all queued before the app handles the first: a
    Backspace must not be overtaken by the digit after it (Textual #6605)."""
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        inp = app.screen.query_one("#knob-gpu_count", Input)
        inp.focus()
        inp.value = "1"
        inp.cursor_position = 1
        await pilot.pause()
        keys = ["backspace", "4", "backspace", "2", "left", "3", "end", "backspace", "8"]
        for key in keys:
            char = key if len(key) == 1 else ("\x7f" if key == "backspace" else None)
            app.post_message(events.Key(key, char))
        await settle(pilot)
        assert inp.value == "38"
        assert _plan_line(app.screen).startswith("plan: dp=38 ")
