"""The memory bar shows the peak's parts and names the knob that moves the largest (no app
needed: the widget renders the plan record it is given)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.synthetic import QWEN3_0_6B, write_checkpoint

from veri_tui.app.widgets.memory_bar import MemoryBar
from veri_tui.plan import plan


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bar") / "qwen3-0.6b"
    write_checkpoint(path, QWEN3_0_6B)
    return path


@pytest.mark.parametrize(
    ("knobs", "largest", "knob"),
    [
        ({"micro_batch_size": 4, "activation_checkpointing": "none"}, "activations",
         "activation_checkpointing"),
        ({"micro_batch_size": 4}, "logits", "micro_batch_size or max_seq_length"),
        ({"max_seq_length": 256}, "states", "zero_stage, lora_rank or gpu_count"),
    ],
)  # fmt: skip
def test_bar_shows_the_parts_and_the_knob_for_the_largest(
    qwen: Path, knobs: dict, largest: str, knob: str
) -> None:
    rec = plan(model=str(qwen), gpu="L4-24GB", **knobs)
    bar = MemoryBar()
    bar.record = rec
    lines = bar.render().plain.splitlines()
    peak = rec.activations["peak"]
    assert lines[0].startswith(f"GPU peak {peak['peak_bytes'] / 1e9:.1f} GB of 24.0 GB = states")
    for part in ("states", "overhead"):
        assert part in lines[0]
    assert peak["largest"] == largest and lines[-1].startswith(f"largest: {largest}")
    assert knob in lines[-1]
