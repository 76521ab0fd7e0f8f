"""The final artifact: a complete model directory, written aside and renamed into place.

Written collectively without gathering the model: for a full fine-tune rank 0 receives one
parameter at a time (each rank sends its rows, point to point, straight into that tensor),
appends it to the Hugging Face safetensors shards (`veri_tui.trainer.weights.ShardWriter`) and frees
it, so rank 0 holds at most the largest parameter (the embedding) beyond its shard, and the
others nothing. The shards are
`model.safetensors`, or `model-0000k-of-0000n.safetensors` + `model.safetensors.index.json`
above the `artifact_shard_bytes` knob (default 5 GB, as `save_pretrained`), in the dtype trained
(bf16, or the fp32 masters; transformers 5's fused routed experts written back one tensor
per expert, as read: veri_tui/trainer/experts.py); then config, generation config and tokenizer.
LoRA: only the trainable adapter is gathered and saved the PEFT way
(`adapter_model.safetensors`, `adapter_config.json`). Every artifact gets `manifest.json`
(size + sha256 per file, the checkpoints' format; `verify_artifact` checks it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.atomic import fsync_dir
from veri_tui.trainer.experts import ATTR, split, unfused
from veri_tui.trainer.measure import mark_memory
from veri_tui.trainer.parallelize import unwrap
from veri_tui.trainer.weights import Planned, ShardWriter, plan_shards

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

SHARD_BYTES = 5 * 10**9  # save_pretrained's default max_shard_size ("5GB")


def _fsync_tree(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fsync_dir(folder)


def _replace_dir(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`; an existing `out` is moved aside first, then removed."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(tmp, out)
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _to_rank0(t: torch.Tensor, rank: int) -> torch.Tensor | None:
    """The whole tensor on rank 0 (None elsewhere); collective for a DTensor.

    FSDP2 shards dim 0 in `torch.chunk` pieces, rank r holding rows [r*c, (r+1)*c). Rank 0
    receives each piece straight into its rows of one tensor (point to point): no rank
    gathers the whole (`full_tensor()` would, on every rank).
    """
    if not isinstance(t, DTensor):
        return t.detach() if rank == 0 else None
    local = t.to_local().detach()
    rows, world = t.shape[0], dist.get_world_size()
    step = -(-rows // world)
    if rank != 0:
        if local.numel():
            dist.send(local.contiguous(), dst=0)
        return None
    whole = torch.empty(t.shape, dtype=t.dtype, device=local.device)
    whole[: local.shape[0]].copy_(local)
    for r in range(1, world):
        part = whole[r * step : min(rows, (r + 1) * step)]
        if part.numel():
            dist.recv(part, src=r)
    return whole


def _model_tensors(base: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters (a tied one once, under its first name) then persistent buffers."""
    keys = set(base.state_dict())
    params = list(base.named_parameters())
    return params + [(n, b) for n, b in base.named_buffers() if n in keys]


def _model_class(base: nn.Module) -> type:
    """The model's own class (FSDP2 swaps in a subclass named FSDP<class>)."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(base).__mro__ if not issubclass(c, FSDPModule))


def _write_full(
    base: nn.Module, tmp: Path, rank: int, precision: str, shard_bytes: int
) -> dict[str, Any]:
    tensors = _model_tensors(base)
    # Fused routed experts go back one tensor per expert, as they were read (experts.py).
    layouts = base.__dict__.get(ATTR, {})
    plan = []
    for n, t in tensors:
        if n in layouts:
            plan += [Planned(k, t.dtype, shape) for k, shape in unfused(t, layouts[n])]
        else:
            plan.append(Planned(n, t.dtype, tuple(t.shape)))
    writer = ShardWriter(tmp, plan_shards(plan, shard_bytes)) if rank == 0 else None
    for name, t in tensors:
        whole = _to_rank0(t, rank)
        if writer is not None and whole is not None:
            if name in layouts:
                pieces = zip(
                    unfused(whole, layouts[name]), split(whole, layouts[name]), strict=True
                )
                for (key, _), piece in pieces:
                    writer.write(key, piece)
            else:
                writer.write(name, whole)
        del whole
    if writer is None:
        return {}
    files = writer.finish()
    config = cast("PreTrainedModel", base).config  # a full job's model: transformers'
    config.dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    config.use_cache = True  # training turned the KV cache off; generation wants it
    config.architectures = [_model_class(base).__name__]
    config.save_pretrained(tmp)
    hf = cast("PreTrainedModel", base)
    if getattr(hf, "generation_config", None) is not None and hf.can_generate():
        hf.generation_config.save_pretrained(tmp)
    return files


def _write_adapter(base: nn.Module, tmp: Path, rank: int) -> dict[str, Any]:
    adapter = {}
    for name, p in base.named_parameters():
        if p.requires_grad:  # only the adapter trains; the frozen base is never gathered
            whole = _to_rank0(p, rank)
            if whole is not None:
                adapter[name] = whole.to("cpu")
    if rank == 0:
        cast("PeftModel", base).save_pretrained(str(tmp), state_dict=adapter)  # a LoRA job's
    return {}


def save_artifact(
    model: nn.Module,
    tokenizer: Any,
    out: Path,
    *,
    lora: bool,
    precision: str,
    shard_bytes: int = SHARD_BYTES,
) -> None:
    """Write the artifact collectively (every rank calls it); rank 0 writes the files."""
    mark_memory("train")
    rank = dist.get_rank()
    rank0 = rank == 0
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if rank0:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    base = unwrap(model)
    if lora:
        known = _write_adapter(base, tmp, rank)
    else:
        known = _write_full(base, tmp, rank, precision, shard_bytes)
    if rank0:
        tokenizer.save_pretrained(tmp)
        manifest.write(tmp, known)
        _fsync_tree(tmp)
        _replace_dir(tmp, out)
    dist.barrier()
    mark_memory("artifact")


def verify_artifact(folder: Path) -> list[str]:
    """What is wrong with an artifact folder against its manifest; [] when it is whole."""
    return manifest.problems(Path(folder))
