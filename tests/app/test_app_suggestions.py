"""The plan editor's ways out for a model that does not fit: the first (ctrl+y) fits when any
does, and the title says plainly when none does.

Llama-3.1-8B full fine-tuned on one L4-24GB: the first suggestion was `lora_rank=16 still
over`. A header-only Llama-3.1-8B-shaped checkpoint (sparse files) made in the test.
"""

from __future__ import annotations

from pathlib import Path

from app_helpers import editor_ready, type_into
from support.synthetic import LLAMA_3_1_8B, write_checkpoint
from textual.widgets import Select, Static

from veri_tui.app import create_app


def _suggestions(screen) -> str:
    return str(screen.query_one("#suggestions", Static).render())


async def test_ctrl_y_applies_a_way_out_that_fits(veri_home: Path, tmp_path: Path) -> None:
    model = tmp_path / "llama-3.1-8b"
    write_checkpoint(model, LLAMA_3_1_8B, shards=4)
    app = create_app(model=str(model))
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        screen.query_one("#knob-gpu", Select).value = "L4-24GB"
        await pilot.pause()
        record = screen.record
        assert record is not None and not record.fits
        first = record.suggestions[0]
        assert first.fits and first.text.startswith("lora_rank=16 load_in_4bit=true fits: ")
        shown = _suggestions(screen).splitlines()
        assert shown[0] == "Does not fit. Ways out (ctrl+y applies 1):"
        assert shown[1] == f" 1. {first.text}"
        assert any(line.endswith("still over: 16.7 GB/GPU") for line in shown[2:])
        await pilot.press("ctrl+y")
        await pilot.pause()
        assert screen.record is not None and screen.record.fits
        assert screen.record.states_bytes_per_gpu == first.states_bytes_per_gpu
        assert screen.query_one("#knob-lora_rank").value == "16"
        assert screen.query_one("#knob-load_in_4bit").value is True

        # A GPU on which nothing fits, at any count: the title says so plainly. (2.15 GB
        # leaves a budget of 1.8 MB after the 2 GiB reserve; 2 GB is refused outright.)
        await type_into(pilot, "#knob-lora_rank", "")
        screen.query_one("#knob-load_in_4bit").value = False
        screen.query_one("#knob-gpu", Select).value = "custom"
        await type_into(pilot, "#knob-gpu_custom", "2.15")
        record = screen.record
        assert record is not None and not any(s.fits for s in record.suggestions)
        assert _suggestions(screen).splitlines()[0] == (
            "Nothing fits on this GPU type, not even with one of these (ctrl+y applies 1):"
        )
