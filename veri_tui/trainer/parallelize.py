"""Process group, device, and the planned data-parallel wrapping (DDP or FSDP2).

Models arrive on the meta device (veri_tui/trainer/loading.py): each is wrapped as planned first and
filled after (`materialize`), so a rank allocates and reads only what it keeps.
zero_stage 0: DDP (gradients as bucket views, so no second gradient copy is held).
zero_stage 2: FSDP2 per decoder layer then the root, reshard_after_forward=False (the
bf16 compute copy stays through backward, weights/grads/optimizer sharded).
zero_stage 3: FSDP2 per decoder layer then the root, resharding after forward.
precision fp32, and LoRA in either precision (fp32 adapters): fp32 sharded trained params,
bf16 all-gather/compute, fp32 reduce.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.supervise.watchdog import DIST_TIMEOUT_ENV, DIST_TIMEOUT_S
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.faults import FaultPlan
from veri_tui.trainer.loading import materialize
from veri_tui.trainer.measure import mark_memory
from veri_tui.trainer.model import decoder_layers

# DIST_TIMEOUT_S: the watchdog's (veri_tui/jobfolder/supervise/watchdog.py): the one value
__all__ = ["DIST_TIMEOUT_S"]


@dataclass
class Runtime:
    """The process group facts a rank needs."""

    device: torch.device
    rank: int
    world_size: int
    mesh: Any = None


def init_runtime(cfg: TrainConfig) -> Runtime:
    """Pick cuda+nccl or cpu+gloo (device auto), join the process group, check dp."""
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: cuda requested but no CUDA device is available")
    if cfg.load_in_4bit:  # before any group, data or model
        from veri_tui.trainer.model import QLORA_NEEDS_CUDA, require_bitsandbytes

        if not want_cuda:
            raise ConfigError(QLORA_NEEDS_CUDA)
        require_bitsandbytes()
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world != cfg.data_parallel_size:
        raise ConfigError(
            f"data_parallel_size: TP*CP*DP*PP={cfg.data_parallel_size} != WORLD_SIZE={world}"
        )
    if want_cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        count = torch.cuda.device_count()
        if local >= count:  # else set_device fails with an opaque error, classed UNKNOWN
            raise ConfigError(
                f"gpu_count: this rank has LOCAL_RANK={local} but torch.cuda.device_count()="
                f"{count} on this host; run at most {count} ranks per node "
                "(or check CUDA_VISIBLE_DEVICES)"
            )
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        FaultPlan(int(os.environ.get("RANK", 0))).before_rendezvous()  # tests only (VERI_FAULT)
        if "MASTER_ADDR" not in os.environ:  # plain `python -m veri_tui.trainer`: a group of one
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        backend = "nccl" if want_cuda else "gloo"
        if want_cuda and cfg.cpu_offload:
            # Offloaded shards and their grads live on the CPU: the grad-norm reduction of
            # CPU DTensors needs a CPU backend beside nccl (as torchtitan does for offload).
            backend = "cuda:nccl,cpu:gloo"
        dist.init_process_group(
            backend, device_id=device if want_cuda else None, timeout=dist_timeout()
        )
    rt = Runtime(device=device, rank=dist.get_rank(), world_size=dist.get_world_size())
    if cfg.zero_stage in (2, 3):
        from torch.distributed.device_mesh import init_device_mesh

        rt.mesh = init_device_mesh(device.type, (rt.world_size,))
    return rt


def dist_timeout() -> timedelta:
    """How long a collective waits for its peers: `VERI_DIST_TIMEOUT_S`, else 30 minutes.

    NCCL's own default is 10 minutes, shorter than what one rank may do alone while the
    others wait in a collective (writing a large artifact, verifying a checkpoint).
    """
    raw = os.environ.get(DIST_TIMEOUT_ENV, "")
    if not raw:
        return timedelta(seconds=DIST_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"{DIST_TIMEOUT_ENV}: expected seconds above 0, got {raw!r}")
    return timedelta(seconds=seconds)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def offload_active(cfg: TrainConfig, rt: Runtime) -> bool:
    """CPUOffloadPolicy needs an accelerator (field notes): only on CUDA."""
    return cfg.cpu_offload and cfg.zero_stage in (2, 3) and rt.device.type == "cuda"


def materialize_device(cfg: TrainConfig, rt: Runtime) -> torch.device:
    """Where the policy's sharded parameters are allocated: on the host under cpu_offload
    (FSDP2's lazy init refuses offloaded parameters whose DTensor says `cuda`: "FSDP
    parameters should be materialized on CPU when enabling CPU offloading"; torchtitan
    materializes on the CPU there too), else straight on this rank's device."""
    return torch.device("cpu") if offload_active(cfg, rt) else rt.device


def offload_threads(
    cfg: TrainConfig, rt: Runtime, env: Mapping[str, str] | None = None
) -> int | None:
    """The CPU threads this rank's offloaded AdamW step gets, or None to leave torch's.

    With cpu_offload the optimizer step runs on the host, and OMP_NUM_THREADS=1 (set by the
    supervisor, or by torchrun when unset) would run it on one core: each rank gets its share
    of the cores this process may use instead. An OMP_NUM_THREADS the user set stays (the
    supervisor marks its own default with VERI_OMP_DEFAULT=1).
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    if not offload_active(cfg, rt):
        return None
    if "OMP_NUM_THREADS" in environ and environ.get("VERI_OMP_DEFAULT") != "1":
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ranks_here = int(environ.get("LOCAL_WORLD_SIZE") or 1)
    return max(1, (cores or 1) // max(1, ranks_here))


def wrap_policy(model: nn.Module, cfg: TrainConfig, rt: Runtime) -> nn.Module:
    """Apply the planned parallelism to the trained model; returns the module to call."""
    if cfg.zero_stage == 0:
        materialize(model, rt.device)  # whole on every rank: straight onto its device
        if not getattr(model, "is_loaded_in_4bit", False) and _elsewhere(model, rt.device):
            model.to(rt.device)  # a model loaded whole (VERI_LOAD=from_pretrained)
        mark_memory("load_policy")
        if rt.world_size == 1:
            return model  # one process: DDP would only add hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [rt.device.index] if rt.device.type == "cuda" else None
        return DDP(model, device_ids=ids, gradient_as_bucket_view=True)
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    kw: dict[str, Any] = {"mesh": rt.mesh, "reshard_after_forward": cfg.zero_stage == 3}
    if fp32_trainable(cfg):
        kw["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    offload = offload_active(cfg, rt)
    kw["offload_policy"] = CPUOffloadPolicy() if offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    materialize(model, materialize_device(cfg, rt), buffer_device=rt.device)
    mark_memory("load_policy")
    return model


def _elsewhere(model: nn.Module, device: torch.device) -> bool:
    """Whether a tensor of the model is not on `device` (a model loaded whole on the host).
    Materialized ones are there already, and `.to` would only swap each tensor for itself,
    which a fake tensor (a trace: veri_tui/trainer/fakecuda) cannot do."""
    tensors = [*model.parameters(), *model.buffers()]
    return any(t.device != device for t in tensors)


def wrap_reference(ref: nn.Module, cfg: TrainConfig, rt: Runtime) -> nn.Module:
    """DPO full fine-tune reference: whole at stage 0, else sharded per decoder layer.

    At stages 2 and 3 every layer is resharded after its forward (the reference has no
    backward to keep it for), so a rank holds 2N/dp plus the units in flight.
    """
    if cfg.zero_stage == 0:
        materialize(ref, rt.device)
        mark_memory("load_reference")
        return ref.to(rt.device) if _elsewhere(ref, rt.device) else ref
    from torch.distributed.fsdp import fully_shard

    for layer in decoder_layers(ref):
        fully_shard(layer, mesh=rt.mesh, reshard_after_forward=True)
    fully_shard(ref, mesh=rt.mesh, reshard_after_forward=True)
    materialize(ref, rt.device)
    mark_memory("load_reference")
    return ref


def unwrap(model: nn.Module) -> nn.Module:
    """The module under a DDP wrapper (FSDP2 wraps in place)."""
    return getattr(model, "module", model)


@contextlib.contextmanager
def grad_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """DDP: skip the all-reduce on all but the last micro-batch. FSDP2: reduce every time.

    DDP accumulates into its (whole) gradients either way, so skipping costs no memory. FSDP2
    with sync off would keep every layer's *unsharded* gradient until the last micro-batch
    (2-4 bytes x N per GPU that the plan does not hold); so at stages 2 and 3 each micro-batch
    reduce-scatters and only the sharded gradient accumulates (the throughput model counts it).
    """
    if hasattr(model, "no_sync") and not sync:
        # DDP's context manager, reached through nn.Module's __getattr__ (Tensor | Module).
        no_sync = cast(Callable[[], contextlib.AbstractContextManager[None]], model.no_sync)
        with no_sync():
            yield
        return
    yield


def fp32_trainable(cfg: TrainConfig) -> bool:
    """Whether the trained parameters are fp32: precision fp32, or LoRA's adapters (fp32 in
    either precision, veri_tui/trainer/model.py ADAPTER_DTYPE)."""
    return cfg.precision == "fp32" or cfg.lora_rank > 0


def autocast(cfg: TrainConfig, rt: Runtime) -> contextlib.AbstractContextManager[None]:
    """fp32 trained weights at stage 0 compute in bf16 (FSDP2 casts via its policy)."""
    if fp32_trainable(cfg) and cfg.zero_stage == 0:
        return torch.autocast(rt.device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
