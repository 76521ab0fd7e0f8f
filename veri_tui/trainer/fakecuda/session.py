"""One process plays one rank of N on fake CUDA devices: the device, torch.cuda, the process
group and the environment a torchrun rank would have, for the duration of a block.

`fake_rank(world, rank)`:
- the fake CUDA device (veri_tui/trainer/fakecuda/device.py) and torch.cuda's Python side
  (runtime.py) for a node of `gpus` GPUs named `gpu_name`;
- a process group of `world` ranks in which this process is `rank`: torch's "fake" backend
  over a FakeStore, whose collectives return at once (nothing crosses a process: the other
  ranks run nowhere). FSDP2's shards, DDP's buckets and the DeviceMesh are those of a real
  rank `rank` of `world`;
- RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and MASTER_ADDR as torchrun sets them,
  and the attention kernels a GPU picks (kernels.py).

Every rank of a data-parallel job runs the same code on the same shapes; they differ only
in which rows of each parameter they hold, and FSDP2 gives rank 0 the largest share (dim 0
split in torch.chunk pieces), so rank 0's peak is every rank's bound: the trace plays rank 0
unless told otherwise. On exit everything is as it was (the group destroyed, the patches
undone, the environment restored), so tests run traces beside real CPU jobs in one process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch.distributed as dist

from veri_tui.trainer.fakecuda import device, kernels, runtime

#: The name torch.cuda.get_device_name gives in a trace unless one is asked for.
DEFAULT_GPU_NAME = "fake CUDA device"


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def fake_rank(
    world: int,
    rank: int = 0,
    gpus: int | None = None,
    gpu_name: str = DEFAULT_GPU_NAME,
    attention: dict[str, int] | None = None,
) -> Iterator[None]:
    """Be rank `rank` of `world` on fake CUDA devices (module docstring); `gpus` per node
    (default: `world`, one node); `attention` collects the attention kernels' call counts."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise device.FakeCudaError("fake CUDA: this process is already in a process group")
    per_node = gpus or world
    env = {
        "RANK": str(rank), "LOCAL_RANK": str(rank % per_node), "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(rank // per_node),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
    }  # fmt: skip
    with contextlib.ExitStack() as stack:
        stack.enter_context(device.installed())
        stack.enter_context(runtime.patched(per_node, gpu_name))
        stack.enter_context(kernels.gpu_attention({} if attention is None else attention))
        stack.enter_context(_environ(env))
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
        stack.callback(dist.destroy_process_group)
        yield
