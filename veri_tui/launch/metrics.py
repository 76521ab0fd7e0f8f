"""Metric lines of the rank-0 log: pick them out, and show each as one readable row.

The trainer writes one JSON object per logged optimizer step (docs/interfaces.md, "Metric
line"), with Hugging Face Trainer's names: `{"step", "total_steps", "loss", "learning_rate",
"grad_norm", "epoch", "tokens_per_s", "peak_mem_bytes"}`, `eval_loss` on the steps the job
evaluates, plus TRL's `rewards/margins` and `rewards/accuracies` for DPO; a job folder of an
older release says `lr` (`metric_of` renames it: veri_tui/jobfolder/knobs/trackers.py). Raw, such
a line is about 150 characters and is cut at the edge of a terminal; `metric_row` says the
same in about 60 (`step 7/20  loss 2.314  lr 1.0e-04  grad 0.82  1,234 tok/s  mem 1.2 GB`).
Pure functions, no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from veri_tui.jobfolder.knobs.trackers import hf_names
from veri_tui.plan.memory import gb


def metric_of(line: str) -> dict[str, Any] | None:
    """The metric object of a rank-0 log line, or None for any other line."""
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not (isinstance(obj, dict) and "step" in obj and "loss" in obj):
        return None
    return hf_names(obj)  # an older release's `lr` as `learning_rate`


#: (key, label, format) after the step: a key that is missing or not a number is left out.
_FIELDS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("loss", "loss", lambda v: f"{v:.4g}"),
    ("eval_loss", "eval_loss", lambda v: f"{v:.4g}"),
    ("learning_rate", "lr", lambda v: f"{v:.1e}"),
    ("grad_norm", "grad", lambda v: f"{v:.3g}"),
    ("rewards/margins", "margin", lambda v: f"{v:.3g}"),
    ("rewards/accuracies", "acc", lambda v: f"{v:.2f}"),
    ("tokens_per_s", "", lambda v: f"{v:,.0f} tok/s"),
    ("peak_mem_bytes", "mem", gb),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def metric_row(metric: dict[str, Any]) -> str:
    """One metric object as a row: `step 7/20  loss 2.314  lr 1.0e-04  grad 0.82  ...`."""
    metric = hf_names(metric)
    total = metric.get("total_steps")
    parts = [f"step {metric.get('step')}" + (f"/{total}" if total is not None else "")]
    for key, label, fmt in _FIELDS:
        value = _number(metric.get(key))
        if value is None:
            # A loss that went NaN or inf is exactly what the user must see.
            if key == "loss" and key in metric:
                parts.append(f"loss {metric[key]}")
            continue
        parts.append(f"{label} {fmt(value)}" if label else fmt(value))
    return "  ".join(parts)


def log_row(line: str) -> str:
    """A rank-0 log line as the monitor shows it: metric lines as rows, others unchanged."""
    metric = metric_of(line)
    return line if metric is None else metric_row(metric)
