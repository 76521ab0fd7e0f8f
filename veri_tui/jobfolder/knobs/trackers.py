"""Metric names and the trackers a job's metric lines also go to (`report_to`).

A metric line (docs/interfaces.md, "Metric line") uses Hugging Face Trainer's names:
`loss`, `grad_norm`, `learning_rate`, `epoch`, `eval_loss` (and TRL's `rewards/...` for
dpo), beside veri-tui's own `step`, `total_steps`, `tokens_per_s` and `peak_mem_bytes`.
Job folders written before issue 27 say `lr`; `hf_names` gives any line the current names,
so every reader (the monitor, `veri-tui jobs`, the compat folders) reads old and new alike.

`report_to` names trackers from TRACKERS; each is an optional extra of the package
(`pip install 'veri-tui[tensorboard]'`), imported by the trainer's rank 0 only when named
(veri_tui/trainer/tracking.py). The launch preflight refuses one that is not installed where the job
trains (`missing`), so a run never fails on it midway. Standard library only.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from veri_tui.jobfolder.knobs.fields import TRACKERS

#: The module each tracker's package provides (mlflow-skinny provides `mlflow` too).
MODULES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb",
           "mlflow": "mlflow"}  # fmt: skip
#: Names metric lines had before they took Hugging Face Trainer's.
OLD_NAMES = {"lr": "learning_rate"}


def hf_names(metric: dict[str, Any]) -> dict[str, Any]:
    """The metric line with Hugging Face Trainer's names (an older line's `lr` renamed)."""
    if not any(k in metric for k in OLD_NAMES):
        return metric
    return {OLD_NAMES.get(k, k): v for k, v in metric.items()}


def trackers_of(value: Any) -> list[str]:
    """The trackers a `report_to` value names, in order, each once (None: none)."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else list(value)
    return [n for n in dict.fromkeys(names) if n in TRACKERS]


def install_hint(name: str) -> str:
    """How to install one tracker: the package's extra."""
    return f"pip install 'veri-tui[{name}]' (or pip install {name})"


def missing(value: Any, find: Callable[[str], Any] = importlib.util.find_spec) -> list[str]:
    """The trackers of `value` whose package this interpreter cannot import (found without
    importing it: the app and the planner stay free of them)."""
    return [n for n in trackers_of(value) if find(MODULES[n]) is None]


def missing_message(name: str, where: str) -> str:
    """The one line a preflight (or the trainer, as a last resort) says for it."""
    return f"{name} is not installed {where}; {install_hint(name)}, or drop it from report_to"


def hf_log_names(metric: dict[str, Any]) -> dict[str, float]:
    """What a tracker logs of a metric line, named as Hugging Face Trainer's TensorBoard,
    trackio and W&B callbacks name it (`rewrite_logs`): `train/loss`, `eval/loss`, ...; the
    numbers only, without `step` (the tracker's own axis) and `total_steps`."""
    out: dict[str, float] = {}
    for key, value in hf_names(metric).items():
        if key in ("step", "total_steps") or isinstance(value, bool):
            continue
        if not isinstance(value, int | float):
            continue
        name = "eval/" + key.removeprefix("eval_") if key.startswith("eval_") else "train/" + key
        out[name] = float(value)
    return out
