"""The CUDA-path decisions of trainer/parallelize.py, pinned on one CPU process.

They cannot show on 2 CPU ranks as failures (issue 10, part 7), so each is pinned here: FSDP2
reduce-scatters on every micro-batch (DDP alone skips its all-reduce), the process group's
timeout, and LOCAL_RANK checked against the visible GPUs before `set_device` (only CUDA is
mocked). Real gloo groups of one process, created and destroyed by each test.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from trainer.config import TrainConfig
from trainer.errors import ConfigError
from trainer.parallelize import DIST_TIMEOUT_S, dist_timeout, grad_sync, init_runtime


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _cfg(**over) -> TrainConfig:
    here = Path(".")
    cfg = TrainConfig(here, "sft_text", "m", dataset=Path("d"), output_dir=here)
    for key, value in over.items():
        setattr(cfg, key, value)
    return cfg


def _backward(model: nn.Module) -> None:
    model(torch.ones(2, 4)).sum().backward()


def test_fsdp_reduces_every_micro_batch(group: None) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    with grad_sync(model, sync=False):  # a micro-batch before the last
        _backward(model)
    # Reduced (sharded) gradients exist now; with sync off FSDP2 would hold the unsharded
    # ones aside and leave .grad empty until the last micro-batch:
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    model.set_requires_gradient_sync(False)
    _backward(model)
    assert all(p.grad is None for p in model.parameters())  # what the old code did


def test_ddp_skips_the_all_reduce_until_the_last_micro_batch(group: None) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(nn.Linear(4, 1))
    with grad_sync(model, sync=False):
        assert model.require_backward_grad_sync is False
        _backward(model)
    with grad_sync(model, sync=True):
        assert model.require_backward_grad_sync is True


def test_process_group_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DIST_TIMEOUT_S == 1800 and dist_timeout() == timedelta(minutes=30)
    monkeypatch.setenv("VERI_DIST_TIMEOUT_S", "abc")
    with pytest.raises(ConfigError, match="^VERI_DIST_TIMEOUT_S: expected seconds above 0"):
        dist_timeout()
    monkeypatch.setenv("VERI_DIST_TIMEOUT_S", "77")
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", "RANK": "0", "WORLD_SIZE": "1"}
    for key, value in {**env, "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(key, value)
    rt = init_runtime(_cfg(device="cpu"))
    try:
        backend = dist.group.WORLD._get_backend(rt.device)
        assert backend.options._timeout == timedelta(seconds=77)  # what the group really got
    finally:
        dist.destroy_process_group()


def test_local_rank_beyond_the_visible_gpus_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: object) -> None:
        raise AssertionError("set_device must not be reached")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", never)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError) as err:
        init_runtime(_cfg(device="cuda", data_parallel_size=4))
    assert err.value.code == "CONFIG_ERROR"
    assert "LOCAL_RANK=3" in err.value.message and "device_count()=2" in err.value.message
    assert err.value.message.startswith("gpu_count: ")
