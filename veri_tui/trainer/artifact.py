"""The final artifact: a complete model directory, written aside and renamed into place.

Written collectively without gathering the model: for a full fine-tune rank 0 receives the
parameters a group at a time (a decoder layer's together: one gather over the job's process
group, veri_tui/trainer/gather.py), appends each to the Hugging Face safetensors shards
(`veri_tui.trainer.weights.ShardWriter`) and frees them, so rank 0 holds at most one group
(a layer, or the embedding) beyond its shard, and the others nothing. The shards are
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

from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.atomic import fsync_dir
from veri_tui.trainer.experts import ATTR, split, unfused
from veri_tui.trainer.gather import gathered
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
    for name, whole in gathered(tensors, rank):
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
    # Only the adapter trains; the frozen base is never gathered.
    trained = [(n, p) for n, p in base.named_parameters() if p.requires_grad]
    for name, whole in gathered(trained, rank):
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
