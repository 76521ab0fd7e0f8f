"""Activation checkpointing as the trainer applies it (veri_tui/trainer/checkpointing.py): every
mode computes the same loss and gradients as no checkpointing, selective installs torch's
selective-checkpoint contexts, and the spec's knob and its alias resolve as planned. What
each mode keeps in memory is measured in tests/plan/test_saved_tensors.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.launch.spec import make_record
from veri_tui.plan import load_job_config, plan_job
from veri_tui.trainer import checkpointing
from veri_tui.trainer.config import from_spec
from veri_tui.trainer.losses import token_logps

TINY = Path(__file__).resolve().parents[2] / "assets" / "tiny-model"


def _grads(mode: str) -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(TINY, attn_implementation="sdpa")
    checkpointing.apply(model, mode)
    model.train()
    ids = torch.randint(
        0, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1)
    )
    loss = -token_logps(model(input_ids=ids).logits, ids).sum()
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def test_every_mode_trains_the_same() -> None:
    loss, grads = _grads("none")
    for mode in ("selective", "full"):
        other_loss, other = _grads(mode)
        assert other_loss == pytest.approx(loss, rel=1e-6)
        for name, g in grads.items():
            torch.testing.assert_close(other[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_selective_uses_torch_selective_contexts() -> None:
    kwargs = checkpointing.checkpoint_kwargs("selective")
    assert kwargs is not None and kwargs["use_reentrant"] is False
    forward, recompute = kwargs["context_fn"]()
    assert type(forward).__name__ == "_CachingTorchDispatchMode"
    assert type(recompute).__name__ == "_CachedTorchDispatchMode"
    assert checkpointing.checkpoint_kwargs("none") is None
    assert checkpointing.checkpoint_kwargs("full") == {"use_reentrant": False}
    with pytest.raises(ValueError, match="activation_checkpointing"):
        checkpointing.checkpoint_kwargs("some")


def _cfg(tmp_path: Path, **hp: object):
    spec = {"method": "sft_text", "model": str(TINY), "dataset": "x.jsonl", "hyperparameters": hp}
    return from_spec(spec, tmp_path)


@pytest.mark.parametrize(
    ("hp", "mode"),
    [
        ({}, "full"),
        ({"gradient_checkpointing": False}, "none"),
        ({"activation_checkpointing": "selective"}, "selective"),
        ({"activation_checkpointing": "selective", "gradient_checkpointing": True}, "selective"),
        ({"activation_checkpointing": "none"}, "none"),
    ],
)
def test_spec_resolves_the_mode(tmp_path: Path, hp: dict, mode: str) -> None:
    cfg = _cfg(tmp_path, **hp)
    assert cfg.activation_checkpointing == mode
    assert cfg.gradient_checkpointing == (mode != "none")


@pytest.mark.parametrize(
    ("hp", "message"),
    [
        ({"activation_checkpointing": "full", "gradient_checkpointing": False}, "contradicts"),
        ({"activation_checkpointing": "partial"}, "is not one of"),
    ],
)
def test_spec_refuses_a_bad_mode(tmp_path: Path, hp: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(tmp_path, **hp)


def test_set_none_turns_checkpointing_off_in_plan_job_json_and_model(tmp_path: Path) -> None:
    # `--set activation_checkpointing=none` once fell back to full (read as null): follow it
    # from the CLI's text through the plan and job.json to the rank's model.
    job = load_job_config(model=str(TINY), sets=["activation_checkpointing=none"])
    plan = plan_job(job)
    assert plan.resolved_parallelism["activation_checkpointing"] == "none"
    record = make_record(
        job, plan, "j", model_path=str(TINY), dataset="d.jsonl", output_dir=str(tmp_path)
    )
    cfg = from_spec(dict(record["spec"]), tmp_path)
    assert (cfg.activation_checkpointing, cfg.gradient_checkpointing) == ("none", False)
    model = AutoModelForCausalLM.from_pretrained(TINY)
    checkpointing.apply(model, cfg.activation_checkpointing)
    assert not model.is_gradient_checkpointing
    checkpointing.apply(model, "full")  # the same check sees a mode that is on
    assert model.is_gradient_checkpointing
