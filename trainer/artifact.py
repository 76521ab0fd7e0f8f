"""The final artifact: a complete model directory, written aside and renamed into place.

Full fine-tune: safetensors + config + tokenizer, in the dtype the run trained (bf16, or
the fp32 master weights for precision fp32). LoRA: the PEFT adapter + tokenizer. Every rank
takes part in gathering the full state dict; rank 0 writes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer.parallelize import unwrap


def _fsync_tree(folder: Path) -> None:
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_dir(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`; an existing `out` is moved aside first, then removed."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(tmp, out)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_artifact(
    model: nn.Module, tokenizer: Any, out: Path, *, lora: bool, precision: str
) -> None:
    """Gather the full state dict (collective) and let rank 0 write the directory."""
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    sd = get_model_state_dict(model, options=full)  # the whole dict on rank 0, {} elsewhere
    if dist.get_rank() == 0:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        base = unwrap(model)
        if lora:
            base.save_pretrained(tmp, state_dict=sd)
        else:
            base.config.dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            base.config.use_cache = True  # training turned the KV cache off; generation wants it
            base.save_pretrained(tmp, state_dict=sd, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        _fsync_tree(tmp)
        _replace_dir(tmp, out)
    dist.barrier()
