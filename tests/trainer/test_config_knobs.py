"""The trainer reads every knob of the schema by its field type (veri_tui/trainer/config.py): no
knob the planner accepts is dropped on the way to a rank, and a bad value names its key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.knobs import Hyperparameters, table
from veri_tui.plan import job_from_fields, plan_job
from veri_tui.plan.model_sources import bundled_tiny_model
from veri_tui.trainer.config import TrainConfig, from_spec

SPEC = {"method": "sft_text", "model_path": "m", "dataset": "d.jsonl"}


def _cfg(tmp_path: Path, **hp: object) -> TrainConfig:
    return from_spec({**SPEC, "hyperparameters": hp}, tmp_path)


def test_every_knob_is_a_trainconfig_field() -> None:
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert {k.name for k in table(Hyperparameters)} <= names


def test_a_planned_job_reaches_the_trainer_whole(tmp_path: Path) -> None:
    fields = {"model": str(bundled_tiny_model()), "max_restarts": "2", "warmup_steps": "3",
              "hang_timeout_s": "90", "keep_checkpoints": 4, "weight_decay": "0.01",
              "activation_checkpointing": "selective", "lora_rank": 4, "seed": 7,
              "lora_target_modules": ["v_proj", "q_proj"], "lora_dropout": "0.05",
              "lr_scheduler": "linear", "report_to": ["trackio", "tensorboard"]}  # fmt: skip
    job = job_from_fields(fields)
    record = plan_job(job)
    spec = {**SPEC, "hyperparameters": job.hyperparameters.to_dict(mode="json"),
            "resolved_parallelism": record.resolved_parallelism}  # fmt: skip
    cfg = from_spec(spec, tmp_path)
    rp = record.resolved_parallelism
    for k in table(Hyperparameters):
        if k.pin:  # the plan's resolved value
            assert getattr(cfg, k.name) == rp[k.name], k.name
        elif k.name not in ("lora_alpha", "max_length"):  # filled in / the method's length
            assert getattr(cfg, k.name) == getattr(job.hyperparameters, k.name), k.name
    assert (cfg.max_restarts, cfg.hang_timeout_s, cfg.weight_decay) == (2, 90.0, 0.01)
    assert cfg.activation_checkpointing == "selective" and cfg.lora_alpha == 8.0
    assert cfg.max_length == job.hyperparameters.max_seq_length
    assert (cfg.lora_target_modules, cfg.lora_dropout, cfg.lr_scheduler) == (
        ["v_proj", "q_proj"], 0.05, "linear")  # fmt: skip
    assert cfg.report_to == ["trackio", "tensorboard"]


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ({"learning_rate": "fast"}, "learning_rate: expected a number, got 'fast'"),
        ({"max_restarts": 1.5}, "max_restarts: expected an integer, got 1.5"),
        ({"resume": "maybe"}, "resume: expected true/false, got 'maybe'"),
        ({"activation_checkpointing": "some"},
         "activation_checkpointing: 'some' is not one of none, selective, full"),
        ({"report_to": "tb"}, "report_to: 'tb' is not one of tensorboard, trackio, wandb, mlflow"),
        ({"report_to": ["trackio", "x"]},
         "report_to: 'x' is not one of tensorboard, trackio, wandb, mlflow"),
        # the values that run are the knob's `available` (knobs/fields.py), "auto" resolved
        ({"precision": "fp16"}, "precision: 'fp16' is not available; use bf16 or fp32"),
        ({"zero_stage": 1}, "zero_stage: 1 is not one of 0, 2, 3"),
    ],
)  # fmt: skip
def test_a_bad_value_names_its_key(tmp_path: Path, hp: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(tmp_path, **hp)
    assert err.value.message == message


def test_gradient_checkpointing_alias_and_batch_size_alias(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, gradient_checkpointing="off", batch_size=3)
    assert (cfg.activation_checkpointing, cfg.gradient_checkpointing) == ("none", False)
    assert cfg.micro_batch_size == 3 and cfg.global_batch_size == 3
    with pytest.raises(ConfigError, match="contradicts gradient_checkpointing=false"):
        _cfg(tmp_path, gradient_checkpointing=False, activation_checkpointing="full")
