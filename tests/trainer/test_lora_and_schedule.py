"""The recipe knobs as the trainer runs them: the learning-rate schedule of each
`lr_scheduler` against its formula, and the peft model built with `lora_target_modules` and
`lora_dropout` wrapping exactly those linears with that dropout (no torchrun)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.plan.model_sources import bundled_tiny_model
from veri_tui.trainer.config import TrainConfig, from_spec
from veri_tui.trainer.model import build_policy
from veri_tui.trainer.schedule import lr_factor, scheduler

WARMUP, TOTAL, PEAK = 3, 13, 2e-4


def _formula(kind: str, step: int) -> float:
    """The schedule written out: linear warmup, then over the 10 steps after it p = (s-3)/10."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    p = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return {"cosine": (1 + math.cos(math.pi * p)) / 2, "linear": 1 - p, "constant": 1.0}[kind]


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_the_lr_follows_the_scheduler(kind: str) -> None:
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(2))], lr=PEAK)
    sched = scheduler(opt, WARMUP, TOTAL, kind)
    seen = []
    for _ in range(TOTAL):
        seen.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    for step in (0, 2, 3, 5, 8, 12):
        assert seen[step] == pytest.approx(PEAK * _formula(kind, step), rel=1e-12), step
    assert seen[WARMUP] == pytest.approx(PEAK)  # the peak right after the warmup
    end = {"cosine": 0.5 * (1 + math.cos(math.pi * 0.9)), "linear": 0.1, "constant": 1.0}
    assert seen[-1] == pytest.approx(PEAK * end[kind])


def test_the_schedules_differ_and_an_unknown_one_is_refused() -> None:
    at = {k: [lr_factor(s, 0, 10, k) for s in range(10)] for k in ("cosine", "linear")}
    assert at["cosine"][5] == pytest.approx(0.5) and at["linear"][5] == pytest.approx(0.5)
    assert at["cosine"][2] > at["linear"][2] and at["cosine"][8] < at["linear"][8]
    with pytest.raises(ValueError, match="lr_scheduler"):
        lr_factor(5, 0, 10, "step")


def _cfg(tmp_path: Path, model: Path, **hp: object) -> TrainConfig:
    spec = {"method": "sft_text", "model_path": str(model), "dataset": "d.jsonl",
            "hyperparameters": {"lora_rank": 4, **hp}}  # fmt: skip
    return from_spec(spec, tmp_path)


def _wrapped(model: nn.Module) -> dict[str, nn.Module]:
    """Each linear peft wrapped -> its dropout module."""
    return {name: m.lora_dropout["default"] for name, m in model.named_modules()
            if hasattr(m, "lora_dropout") and hasattr(m, "base_layer")}  # fmt: skip


@pytest.mark.parametrize(
    ("targets", "dropout"), [(["q_proj", "v_proj"], 0.1), (["down_proj"], 0.0), (None, 0.25)]
)
def test_peft_wraps_exactly_the_targets(tmp_path: Path, targets: list[str] | None,
                                        dropout: float) -> None:  # fmt: skip
    path = bundled_tiny_model()
    model = build_policy(_cfg(tmp_path, path, lora_target_modules=targets, lora_dropout=dropout),
                         path)  # fmt: skip
    wrapped = _wrapped(model)
    every = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    want = set(targets) if targets else every
    assert {n.rsplit(".", 1)[-1] for n in wrapped} == want
    layers = 2  # the tiny model's
    assert len(wrapped) == layers * len(want)
    for drop in wrapped.values():
        if dropout:
            assert isinstance(drop, nn.Dropout) and drop.p == dropout
        else:
            assert isinstance(drop, nn.Identity)


def test_an_unknown_target_is_refused_by_the_trainer(tmp_path: Path) -> None:
    path = bundled_tiny_model()
    with pytest.raises(ConfigError, match=r"^lora_target_modules: 'qkv' .* it has q_proj, k_proj"):
        build_policy(_cfg(tmp_path, path, lora_target_modules=["qkv"]), path)


def test_a_moe_adapts_attention_only(tmp_path: Path) -> None:
    path = bundled_tiny_model().parent / "tiny-moe"
    with pytest.raises(ConfigError, match="gate_proj.*attention only"):
        build_policy(_cfg(tmp_path, path, lora_target_modules=["gate_proj"]), path)


@pytest.mark.parametrize(
    ("key", "value"),
    [("lora_dropout", 1), ("lora_dropout", -0.5), ("lr_scheduler", "step"),
     ("lora_target_modules", []), ("lora_target_modules", "q_proj")],
)  # fmt: skip
def test_the_trainer_refuses_bad_recipe_values(tmp_path: Path, key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: "):
        _cfg(tmp_path, Path("m"), **{key: value})
