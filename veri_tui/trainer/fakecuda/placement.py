"""Where each kind of state lives after a traced step, against where the plan puts it.

A device mismatch inside an op raises by itself in a trace (FakeTensorDeviceMismatchError,
with the op named: tracker.py adds it), as on a GPU. What no op catches is state that is
consistently in the wrong place: a model left on the host, optimizer states made on the
wrong device, offloaded shards materialized on the GPU. `observe` records, at the
optimizer step (when parameters, gradients and AdamW's states all exist), the devices of
each; `problems` compares them with the plan: everything on the GPU, or under cpu_offload
the policy's sharded parameters, gradients and optimizer states on the host and its
buffers on the GPU. AdamW's `step` counters are 0-dimensional host tensors in torch's
AdamW and in the bf16 one (a GPU run keeps them there too) and are not judged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor


def _device(t: torch.Tensor) -> str:
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.device.type


def _first(found: dict[str, str], name: str, device: str) -> None:
    found.setdefault(device, name)  # one example per device: enough to name the defect


def observe(model: nn.Module, opt: torch.optim.Optimizer, ref: nn.Module | None) -> dict[str, Any]:
    """For each kind of state, a device it was found on and one tensor found there."""
    seen: dict[str, dict[str, str]] = {k: {} for k in ("params", "grads", "optimizer", "buffers")}
    names = {id(p): n for n, p in model.named_parameters()}
    for name, p in model.named_parameters():
        _first(seen["params"], name, _device(p))
        if p.grad is not None:
            _first(seen["grads"], name, _device(p.grad))
    for name, b in model.named_buffers():
        _first(seen["buffers"], name, _device(b))
    for param, state in opt.state.items():
        for key, value in state.items():
            if torch.is_tensor(value) and not (key == "step" and value.dim() == 0):
                _first(seen["optimizer"], f"{key} of {names.get(id(param), '?')}", _device(value))
    if ref is not None:
        seen["reference"] = {}
        for name, p in ref.named_parameters():
            _first(seen["reference"], name, _device(p))
    return seen


def expected(offload: bool) -> dict[str, str]:
    """Where each kind of state belongs (parallelize.py, docs/trainer.md)."""
    host = "cpu" if offload else "cuda"
    return {"params": host, "grads": host, "optimizer": host, "buffers": "cuda",
            "reference": "cuda"}  # fmt: skip


def problems(seen: dict[str, dict[str, str]], offload: bool) -> list[str]:
    """One line per kind of state found off its device, naming a tensor found there."""
    want = expected(offload)
    out = []
    for kind, found in seen.items():
        for device, name in found.items():
            if device != want[kind]:
                out.append(f"{kind}: {name} is on {device}, the plan puts it on {want[kind]}")
    return out
