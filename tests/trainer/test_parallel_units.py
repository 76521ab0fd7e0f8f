"""The CUDA-path decisions of veri_tui/trainer/parallelize.py, pinned on one CPU process.

They cannot show on 2 CPU ranks as failures (issue 10, part 7), so each is pinned here: FSDP2
reduce-scatters on every micro-batch (DDP alone skips its all-reduce), the process group's
timeout, LOCAL_RANK checked against the visible GPUs before `set_device`, the group left on
failure too, an offloaded optimizer's share of the cores, and metric lines' peak memory per
window and over ranks (only CUDA is mocked). Real gloo groups of one process, created and
destroyed by each test.
"""

from __future__ import annotations

import os
import resource
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.trainer import peakmem
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.parallelize import (
    DIST_TIMEOUT_S,
    Runtime,
    dist_timeout,
    grad_sync,
    init_runtime,
    offload_threads,
)
from veri_tui.trainer.peakmem import run_peaks, window_peak


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


def _runtime(kind: str) -> Runtime:
    return Runtime(device=torch.device(kind, 0) if kind == "cuda" else torch.device(kind),
                   rank=0, world_size=1)  # fmt: skip


def test_an_offloaded_optimizer_gets_its_share_of_the_cores() -> None:
    cfg = _cfg(cpu_offload=True, zero_stage=3)
    cores = len(os.sched_getaffinity(0))
    ours = {"OMP_NUM_THREADS": "1", "VERI_OMP_DEFAULT": "1", "LOCAL_WORLD_SIZE": "2"}
    assert offload_threads(cfg, _runtime("cuda"), ours) == max(1, cores // 2)
    assert offload_threads(cfg, _runtime("cuda"), {"LOCAL_WORLD_SIZE": "1"}) == cores
    # The user's own OMP_NUM_THREADS stays; no offload (or no GPU, so no offload): torch's.
    assert offload_threads(cfg, _runtime("cuda"), {"OMP_NUM_THREADS": "3"}) is None
    assert offload_threads(_cfg(zero_stage=3), _runtime("cuda"), ours) is None
    assert offload_threads(cfg, _runtime("cpu"), ours) is None


def test_supervisor_marks_its_own_thread_default(tmp_path: Path, monkeypatch) -> None:
    from veri_tui.jobfolder.supervise.launcher import TorchrunLauncher

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    env = TorchrunLauncher().environment()  # the supervisor's launcher: the ranks' environment
    assert (env["OMP_NUM_THREADS"], env["VERI_OMP_DEFAULT"]) == ("1", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    env = TorchrunLauncher().environment()
    assert env["OMP_NUM_THREADS"] == "6" and "VERI_OMP_DEFAULT" not in env


def test_cuda_peaks_are_per_logging_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each window reads the allocator's peaks and resets them; the run's peak survives."""
    peaks = {"alloc": 700, "reserved": 900}

    def reset(_device: object = None) -> None:
        peaks.update(alloc=100, reserved=200)

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: peaks["alloc"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: peaks["reserved"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(peakmem, "_RUN", [0, 0])
    cuda = torch.device("cuda", 0)
    assert window_peak(cuda) == {"peak_mem_bytes": 700, "peak_reserved_bytes": 900}
    peaks.update(alloc=300)  # the next window needed less than the first
    assert window_peak(cuda) == {"peak_mem_bytes": 300, "peak_reserved_bytes": 200}
    assert run_peaks(cuda) == (700, 900)  # what runstats records for the job


def _peak_worker(rank: int, store_path: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=2)
    if rank == 1:  # rank 1, not rank 0, is the fuller one
        torch.ones(64 * 2**20, dtype=torch.uint8).fill_(1)
    got = window_peak(torch.device("cpu"))["peak_mem_bytes"]
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Path(out, f"rank-{rank}").write_text(f"{got} {own}")
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_metric_lines_peak_is_the_fullest_ranks(tmp_path: Path) -> None:
    torch.multiprocessing.spawn(
        _peak_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2
    )
    got = {r: [int(x) for x in (tmp_path / f"rank-{r}").read_text().split()] for r in (0, 1)}
    assert got[0][0] == got[1][0] == max(got[0][1], got[1][1]) == got[1][1]


def test_the_process_group_is_left_on_failure_too(tmp_path: Path, monkeypatch) -> None:
    """destroy_process_group runs in `finally`: a rank that fails leaves its group as one that
    succeeds does (NCCL otherwise warns and may hang at exit), after its failure record."""
    from trainer_jobs import write_job

    import veri_tui.trainer.__main__ as entry
    import veri_tui.trainer.loop

    def joins_then_fails(*_: object) -> None:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        raise RuntimeError("boom after the group was joined")

    monkeypatch.setattr(veri_tui.trainer.loop, "train", joins_then_fails)
    for name in ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "TORCHELASTIC_ERROR_FILE"):
        monkeypatch.delenv(name, raising=False)
    job = write_job(tmp_path, gpu_count=1)
    with pytest.raises(RuntimeError, match="boom"):
        entry.main(["--job", str(job)])
    assert not dist.is_initialized()
    assert (tmp_path / "failures" / "rank-0.json").is_file()
