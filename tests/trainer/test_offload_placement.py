"""cpu_offload's placement, CUDA mocked: the sharded parameters are materialized on the host
(FSDP2's lazy init refuses offloaded parameters whose DTensor says `cuda`), the buffers on the
GPU, and FSDP2 gets CPUOffloadPolicy. What CPU cannot show (FSDP2's own lazy init, which needs
an accelerator) is run by benchmarks/gpu_check.sh's cpu_offload run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_jobs import TINY

from veri_tui.trainer import parallelize
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.loading import PENDING, materialize
from veri_tui.trainer.model import build_policy
from veri_tui.trainer.parallelize import Runtime, materialize_device, wrap_policy

CUDA = torch.device("cuda", 0)


def _cfg(**over: Any) -> TrainConfig:
    cfg = TrainConfig(Path("."), "sft_text", str(TINY), dataset=Path("d"), output_dir=Path("."))
    for key, value in {"zero_stage": 3, "cpu_offload": True, **over}.items():
        setattr(cfg, key, value)
    return cfg


def test_offloaded_shards_are_materialized_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """wrap_policy on a (mocked) CUDA rank: what materialize and fully_shard are given."""
    import torch.distributed.fsdp as fsdp

    seen: dict[str, Any] = {"policies": []}

    def fake_shard(module: torch.nn.Module, **kw: Any) -> torch.nn.Module:
        seen["policies"].append(type(kw["offload_policy"]).__name__)
        return module

    def fake_materialize(model: torch.nn.Module, device: torch.device, **kw: Any) -> None:
        seen["device"], seen["buffers"] = device, kw.get("buffer_device")

    monkeypatch.setattr(fsdp, "fully_shard", fake_shard)
    monkeypatch.setattr(parallelize, "materialize", fake_materialize)
    rt = Runtime(device=CUDA, rank=0, world_size=1)
    for cfg, device, policy in (
        (_cfg(), torch.device("cpu"), "CPUOffloadPolicy"),
        (_cfg(cpu_offload=False), CUDA, "OffloadPolicy"),
        (_cfg(zero_stage=2), torch.device("cpu"), "CPUOffloadPolicy"),
    ):
        seen["policies"] = []
        model = build_policy(cfg, TINY)  # on the meta device, waiting for materialize
        assert PENDING in model.__dict__  # waits for materialize
        wrap_policy(model, cfg, rt)
        assert seen["device"] == device == materialize_device(cfg, rt)
        assert seen["buffers"] == CUDA  # rotary inv_freq must sit beside the activations
        assert set(seen["policies"]) == {policy} and len(seen["policies"]) > 1
    # Without an accelerator nothing is offloaded (CPUOffloadPolicy needs one): on the CPU.
    assert materialize_device(_cfg(), Runtime(torch.device("cpu"), 0, 1)) == torch.device("cpu")


def test_materialize_puts_parameters_and_buffers_where_asked() -> None:
    """The real materialize: parameters filled on the host, buffers moved to another device
    (meta stands in for the GPU: the one other device this box has)."""
    model = build_policy(_cfg(zero_stage=0, cpu_offload=False), TINY)
    materialize(model, torch.device("cpu"), buffer_device=torch.device("meta"))
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    buffers = list(model.buffers())
    assert buffers and {b.device.type for b in buffers} == {"meta"}
    assert float(next(model.parameters()).detach().abs().sum()) > 0  # read from the checkpoint
