"""Tracking (issue 27): metric lines with Hugging Face Trainer's names, read alike from an
older release's lines (`lr`); `report_to` validated by the planner, and a tracker that is
not installed refused at the launch preflight (one line, nothing created), not mid-run.
What TensorBoard and trackio write is read back in tests/trainer/test_eval_loss.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.jobfolder.knobs.trackers import hf_log_names, hf_names, trackers_of
from veri_tui.launch.metrics import metric_of, metric_row
from veri_tui.plan import load_job_config

OLD = {"step": 3, "total_steps": 9, "loss": 1.5, "lr": 2e-4, "grad_norm": 0.5}
NEW = {"step": 3, "total_steps": 9, "loss": 1.5, "learning_rate": 2e-4, "grad_norm": 0.5,
       "epoch": 0.375, "eval_loss": 1.75}  # fmt: skip


def _absent() -> str:
    """A tracker whose package this interpreter lacks (wandb and mlflow are not dev extras)."""
    for name in ("wandb", "mlflow"):
        if importlib.util.find_spec(name) is None:
            return name
    pytest.skip("wandb and mlflow are both installed here")


def test_old_and_new_lines_read_alike() -> None:
    renamed = {"step": 3, "total_steps": 9, "loss": 1.5, "learning_rate": 2e-4, "grad_norm": 0.5}
    assert metric_of(json.dumps(OLD)) == hf_names(OLD) == renamed
    assert metric_of(json.dumps(NEW)) == NEW
    assert metric_row(OLD) == "step 3/9  loss 1.5  lr 2.0e-04  grad 0.5"
    assert metric_row(NEW) == "step 3/9  loss 1.5  eval_loss 1.75  lr 2.0e-04  grad 0.5"


def test_trackers_get_hugging_face_callback_names() -> None:
    assert hf_log_names(NEW) == {
        "train/loss": 1.5, "train/learning_rate": 2e-4, "train/grad_norm": 0.5,
        "train/epoch": 0.375, "eval/loss": 1.75,
    }  # fmt: skip
    assert hf_log_names(OLD)["train/learning_rate"] == 2e-4
    assert trackers_of("trackio") == ["trackio"]
    assert trackers_of(["tensorboard", "trackio", "tensorboard"]) == ["tensorboard", "trackio"]
    assert trackers_of(None) == []


def test_report_to_is_validated_like_every_knob(capsys) -> None:
    job = load_job_config(None, sets=['report_to=["tensorboard", "trackio"]'])
    assert job.hyperparameters.report_to == ["tensorboard", "trackio"]
    assert main(["plan", "--set", "report_to=tensorbord"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        'error: report_to: expected "tensorboard", "trackio", "wandb", "mlflow" or a list of '
        "them (got 'tensorbord')"
    ]


def test_a_tracker_not_installed_is_refused_at_preflight(home: Path, capsys) -> None:
    from veri_tui.launch import jobs

    name = _absent()
    line = (f"{name} is not installed here; pip install 'veri-tui[{name}]' (or pip install "
            f"{name}), or drop it from report_to")  # fmt: skip
    job = load_job_config(None, gpu_count=2, sets=[f"report_to={name}"])
    assert [r for r in jobs.preflight(job, None) if not r[1]] == [("report_to", False, line)]
    assert main(["launch", "--gpu-count", "2", "--set", f"report_to={name}"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: report_to: {line}"]
    assert not (home / "jobs").exists()  # nothing created, nothing started
