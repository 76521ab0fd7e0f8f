"""Metric lines of the rank-0 log as the monitor shows them (veri_tui.launch.metrics)."""

from __future__ import annotations

import json

from veri_tui.launch.metrics import log_row, metric_of, metric_row

LINE = {
    "step": 7,
    "total_steps": 20,
    "loss": 2.314159,
    "lr": 0.0001,
    "grad_norm": 0.8213,
    "tokens_per_s": 1234.4,
    "peak_mem_bytes": 1_234_000_000,
}


def test_metric_line_becomes_a_readable_row() -> None:
    row = log_row(json.dumps(LINE))
    assert row == "step 7/20  loss 2.314  lr 1.0e-04  grad 0.821  1,234 tok/s  mem 1.2 GB"
    assert len(row) < 80 < len(json.dumps(LINE))


def test_dpo_rewards_are_shown() -> None:
    dpo = dict(LINE, **{"rewards/margins": 0.1234, "rewards/accuracies": 0.75})
    dpo.update({"rewards/chosen": -1.0, "rewards/rejected": -1.1})
    row = metric_row(dpo)
    assert "  margin 0.123  acc 0.75  " in row and "chosen" not in row


def test_missing_and_odd_values() -> None:
    assert metric_row({"step": 3, "loss": 1.5}) == "step 3  loss 1.5"
    # A loss gone to NaN stays visible; a value that is not a number is left out.
    assert log_row('{"step": 2, "total_steps": 4, "loss": NaN, "lr": "x"}') == "step 2/4  loss nan"
    assert metric_row({"step": 1, "loss": 1.0, "grad_norm": True}) == "step 1  loss 1"


def test_other_lines_are_unchanged() -> None:
    for line in ("plan: dp=2 zero_stage=3", '{"not": "a metric"}', "{broken", ""):
        assert log_row(line) == line
    assert metric_of('{"step": 3, "total_steps": 9, "loss": 1.5}')["step"] == 3
    assert metric_of("plan: dp=2") is None
    assert metric_of('{"not": "a metric"}') is None
    assert metric_of("[1, 2]") is None
