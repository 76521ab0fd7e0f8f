"""Sharded loading: build on the meta device, shard, then read each rank's own rows from disk.

As torchtitan and torchtune do it: the model is built from its config with every parameter on
the meta device (no memory), LoRA is applied, DDP or FSDP2 is planned
(`veri_tui.trainer.parallelize`), and only then `materialize` allocates this rank's storage
(`to_empty`: its FSDP2 shards, or the whole model under DDP, straight on its device; on the host
under cpu_offload, where FSDP2's lazy init refuses parameters that are not on the CPU) and fills it
from the checkpoint's safetensors files (`veri_tui.trainer.weights`): under FSDP2 each rank reads
only the dim-0 rows its shards hold. No rank ever holds the whole model in host memory, DDP aside
(each rank needs it whole).

What the constructors really computed is kept: buffers (rotary `inv_freq`, built on the CPU
from the config exactly as `from_pretrained` recomputes them) and the LoRA adapters (peft
initialises them with the seeded RNG, as over a loaded base) are copied aside before `to_empty`
and restored after. Tied parameters stay one parameter (the tie is made on the meta model and
FSDP2 keeps it). transformers 5's fused routed experts are filled from the checkpoint's
one-tensor-per-expert layout (veri_tui/trainer/experts.py), each rank reading its own experts.
`VERI_LOAD=from_pretrained` (tests only) loads the old way, whole on every rank.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import nn

from veri_tui.jobfolder.contract.errors import ModelLoadError
from veri_tui.trainer.experts import ATTR, Layout, find_layout, read_experts
from veri_tui.trainer.weights import Entry, checkpoint_entries, read_rows

PENDING = "_veri_pending_load"


def eager() -> bool:
    """Tests only: `VERI_LOAD=from_pretrained` loads the whole model on every rank (the old way)."""
    return os.environ.get("VERI_LOAD") == "from_pretrained"


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Parameters registered inside land on the meta device; buffers stay real."""
    register = nn.Module.register_parameter

    def to_meta(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(self, name, param)
        if param is not None and param.device.type != "meta":
            kept = self._parameters[name]
            assert kept is not None  # just registered, as `param`
            self._parameters[name] = nn.Parameter(kept.to("meta"), kept.requires_grad)

    nn.Module.register_parameter = to_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


@contextlib.contextmanager
def cpu_stand_ins(model: nn.Module, adapted: Callable[[str], bool]) -> Iterator[None]:
    """Give the LoRA targets' meta weights a CPU stand-in while peft wraps them.

    peft creates each adapter on the CPU (seeded init, as over a loaded base), then moves it to
    its base layer's device and dtype: on meta that would lose the init. A stand-in of the same
    shape and dtype (one element, expanded) keeps the adapters on the CPU; the meta weights go
    back in afterwards, with the requires_grad peft set on the stand-in.
    """
    swapped = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and adapted(name):
            weight = module.weight
            if weight.device.type == "meta":
                stand_in = torch.empty((), dtype=weight.dtype).expand(weight.shape)
                module.weight = nn.Parameter(stand_in, requires_grad=weight.requires_grad)
                swapped.append((module, weight))
    try:
        yield
    finally:
        for module, weight in swapped:
            weight.requires_grad_(module.weight.requires_grad)
            module.weight = weight


@dataclass
class Pending:
    """What `materialize` needs: the checkpoint folder and the tensors built for real."""

    path: Path
    kept: dict[str, torch.Tensor]


def defer(model: nn.Module, path: Path) -> nn.Module:
    """Record the checkpoint and copy aside every tensor not on meta (buffers, adapters).

    A model with no parameter on meta (`VERI_LOAD=from_pretrained`) is already loaded.
    """
    if not any(p.device.type == "meta" for p in model.parameters()):
        return model
    kept = {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.device.type != "meta":
            kept[name] = t.detach().clone()
    model.__dict__[PENDING] = Pending(Path(path), kept)
    return model


def _region(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's storage of `t` and the first global row it holds (FSDP2 shards dim 0)."""
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(t, DTensor):
        return t.detach(), 0
    # FSDP2 shards dim 0 over a 1-D mesh in torch.chunk pieces: rank r holds rows
    # [r*c, (r+1)*c) with c = ceil(rows / world), clipped to the rows. Computed from public
    # API (torch.distributed.tensor._utils' compute_local_shape_and_global_offset has no
    # public twin in torch 2.13); the local shape checks the arithmetic.
    local = t.to_local().detach()
    rows = t.shape[0] if t.dim() else 0
    world, rank = t.device_mesh.size(), t.device_mesh.get_local_rank()
    step = -(-rows // world) if rows else 0
    start = min(rank * step, rows)
    expect = (min(start + step, rows) - start, *t.shape[1:])
    one_dim = t.device_mesh.ndim == 1 and all(isinstance(p, Shard) and p.dim == 0
                                              for p in t.placements)  # fmt: skip
    if not one_dim or tuple(local.shape) != tuple(expect):
        raise ModelLoadError(
            f"model: cannot load a shard of shape {tuple(local.shape)} "
            f"(placements {t.placements}, expected {expect} at row {start})"
        )
    return local, start


def _candidates(name: str, prefix: str) -> tuple[str, str, str]:
    """Checkpoint names a model tensor may have: peft's wrapping removed, base prefix tried."""
    key = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return key, key.removeprefix(f"{prefix}."), f"{prefix}.{key}"


def _checkpoint_key(name: str, entries: dict[str, Entry], prefix: str) -> str | None:
    """The checkpoint's name for a model tensor, or None."""
    return next((c for c in _candidates(name, prefix) if c in entries), None)


def _expert_layout(
    names: list[str], entries: dict[str, Entry], prefix: str, experts: int
) -> Layout | None:
    """How the checkpoint stores a fused experts parameter one expert at a time (experts.py)."""
    for name in names:
        for cand in _candidates(name, prefix):
            layout = find_layout(cand, entries, experts)
            if layout is not None:
                return layout
    return None


def _aliases(model: nn.Module) -> dict[int, list[str]]:
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return names


def _retie(model: nn.Module, tied: list[list[str]]) -> None:
    """`to_empty` gives each module its own new tensor: tie them again (FSDP2 keeps ties)."""
    for names in tied:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attr = name.rpartition(".")
            if model.get_parameter(name) is not first:
                setattr(model.get_submodule(owner), attr, first)


def _move_buffers(model: nn.Module, device: torch.device) -> None:
    """Buffers (rotary inv_freq, ...) onto the compute device: FSDP2 manages parameters
    only, so with cpu_offload they would stay on the host beside CUDA activations."""
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None and buf.device != device:
                module._buffers[name] = buf.to(device)


def materialize(
    model: nn.Module, device: torch.device, buffer_device: torch.device | None = None
) -> None:
    """Allocate this rank's storage on `device` and fill it (after DDP/FSDP2 was planned);
    buffers end on `buffer_device` when given (cpu_offload: parameters on the host, buffers
    on the GPU, as torchtitan places them)."""
    pending: Pending | None = model.__dict__.pop(PENDING, None)
    if pending is None:
        return
    tied = [names for names in _aliases(model).values() if len(names) > 1]
    model.to_empty(device=device)
    _retie(model, tied)
    _fill(model, pending)
    if buffer_device is not None:
        _move_buffers(model, buffer_device)


def _fill(model: nn.Module, pending: Pending) -> None:
    """Every parameter and buffer from the checkpoint's files (or the copies kept aside)."""
    entries = checkpoint_entries(pending.path)
    hf = model
    if hasattr(model, "get_base_model"):  # peft's, through nn.Module's __getattr__
        hf = cast(Callable[[], nn.Module], model.get_base_model)()
    prefix = getattr(hf, "base_model_prefix", "") or "model"
    aliases = _aliases(model)
    persistent = {k for k in model.state_dict() if not k.endswith("._extra_state")}
    layouts: dict[str, Layout] = {}
    model.__dict__[ATTR] = layouts  # the artifact writes fused experts back this way
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            local, start = _region(t)
            names = aliases.get(id(t), [name])
            keys = [_checkpoint_key(n, entries, prefix) for n in names if n in persistent]
            key = next((k for k in keys if k), None)
            if key is None and name in pending.kept:  # adapters and non-persistent buffers
                kept = pending.kept[name]
                local.copy_(kept[start : start + local.shape[0]] if local.dim() else kept)
                continue
            layout = None
            if key is None and t.dim() == 3:  # transformers 5's fused routed experts
                layout = _expert_layout(
                    [n for n in names if n in persistent], entries, prefix, t.shape[0]
                )
            if layout is not None:
                read_experts(layout, entries, local, start)
                layouts[name] = layout
                continue
            if key is None:
                raise ModelLoadError(f"model {pending.path}: no tensor for {name} in its files")
            entry = entries[key]
            if entry.shape != tuple(t.shape):
                raise ModelLoadError(
                    f"model {entry.file}: {key} has shape {list(entry.shape)}, "
                    f"the model expects {list(t.shape)}"
                )
            read_rows(entry, local, start)
