"""A LoRA checkpoint holds the adapters and their optimizer states only, and resumes.

bitsandbytes' NF4 linears add their quantization state to `state_dict()` as
`weight.absmax`, `weight.quant_map`, ... (Linear4bit._save_to_state_dict), which
`ignore_frozen_params` (parameters only) kept in every checkpoint. CPU has no bitsandbytes,
so one frozen base linear is given that exact behaviour (its state dict gains those tensors,
its weight the attributes newer bitsandbytes exposes); the rest is the real tiny LoRA model,
a real AdamW step and real DCP saves in a one-rank gloo group.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from trainer_jobs import TINY

from veri_tui.trainer import checkpoint
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.faults import FaultPlan
from veri_tui.trainer.loading import materialize
from veri_tui.trainer.model import build_policy

QUANT = ("absmax", "quant_map", "nested_absmax")


@pytest.fixture
def group(tmp_path: Path) -> Any:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    yield
    dist.destroy_process_group()


def _lora(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    cfg = TrainConfig(Path("."), "sft_text", str(TINY), dataset=Path("d"), output_dir=Path("."))
    cfg.lora_rank, cfg.lora_alpha = 4, 8.0
    torch.manual_seed(seed)
    model = build_policy(cfg, TINY)
    materialize(model, torch.device("cpu"))
    _quantized_look(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    return model, opt


def _quantized_look(model: torch.nn.Module) -> None:
    """The first frozen base linear saves quantization state the way Linear4bit does."""
    base = next(m for n, m in model.named_modules() if n.endswith("q_proj.base_layer"))
    for key in QUANT:
        setattr(base.weight, key, torch.ones(8))

    def save(destination: dict, prefix: str, keep_vars: bool) -> None:
        torch.nn.Linear._save_to_state_dict(base, destination, prefix, keep_vars)
        for key in QUANT:
            destination[f"{prefix}weight.{key}"] = getattr(base.weight, key)

    base._save_to_state_dict = save


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    ids = torch.arange(12).reshape(1, 12)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_trainable_state_names_match_torchs() -> None:
    model, _ = _lora()
    ours = checkpoint.trainable_state(model)
    assert ours and all("lora_" in k for k in ours)
    torch_names = get_model_state_dict(
        model, options=StateDictOptions(ignore_frozen_params=True)
    )  # the names dcp used before (quantization state aside)
    assert set(ours) == {k for k in torch_names if not k.endswith(QUANT)}


def test_lora_checkpoint_holds_adapters_only_and_resumes(tmp_path: Path, group: Any) -> None:
    model, opt = _lora()
    _step(model, opt)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    saved = checkpoint.save(tmp_path / "ck", 1, model, opt, {"data_position": 1},
                            lora=True, keep=2, faults=FaultPlan(0))  # fmt: skip
    keys = list(dcp.FileSystemReader(str(saved)).read_metadata().state_dict_metadata)
    model_keys = {k.removeprefix("model.") for k in keys if k.startswith("model.")}
    assert model_keys == trainable  # the adapters, nothing of the base
    assert not [k for k in keys if any(q in k for q in QUANT)]
    assert all("lora_" in k for k in keys if k.startswith("optim.state."))
    want = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    moments = [s["exp_avg"].clone() for s in opt.state.values()]
    fresh, fresh_opt = _lora(seed=1)  # other adapter init, no optimizer state yet
    _step(fresh, fresh_opt)
    checkpoint.load(tmp_path / "ck", 1, fresh, fresh_opt, lora=True)
    for name, p in fresh.named_parameters():
        if p.requires_grad:
            assert torch.equal(p.detach(), want[name]), name
    assert all(torch.equal(a["exp_avg"], b) for a, b in
               zip(fresh_opt.state.values(), moments, strict=True))  # fmt: skip
