"""Measured per-rank model-state bytes, as contracts section 3 defines them.

Enabled by VERI_MEASURE_STATES=1 (tests and benchmarks). At one optimizer step (the second,
so optimizer states exist, or the last when there is only one) each rank writes
measured/rank-<r>.json with the bytes it holds, counted tensor by tensor:

- params / grads / optimizer: the local shards after backward (whole tensors under DDP);
- compute_copy (stage 2): the unsharded bf16 parameters held from forward through backward,
  measured after the last micro-batch's forward;
- reference (DPO full fine-tune): what the reference model keeps between its forwards: whole
  at stage 0, its per-layer shards under FSDP2 (measured after backward);
- ref_in_flight (FSDP2 only, NOT in `total`): the most of the reference's parameters
  gathered at once during its forward (the root unit and a layer), seen at each layer. Like
  the policy's own gathered layers these are transient: contracts section 3 counts states
  "not counting the transient all-gather of the layer(s) in flight".

`total` sums every component but the transient `ref_in_flight`; nothing else is left out.
Only tensors on the rank's device count (`on_device`): what lives on the host (cpu_offload's
shards, gradients and AdamW moments; AdamW's `step` scalars on CUDA) goes into `host`, by
component, so a GPU's states are never inflated by host memory.

Host memory phases (VERI_MEASURE_MEMORY=1, benchmarks/bench_host_memory.py): each rank
appends to measured/memory-rank-<r>.jsonl, at each phase's end, VmRSS then and VmHWM, the
peak since the previous phase (the peak is reset through /proc/self/clear_refs): `imports`,
`load_policy`, `load_reference`, `train` (up to the artifact), `artifact`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from veri_tui.jobfolder.contract.atomic import write_text_atomic
from veri_tui.trainer.report import RankContext

TRANSIENT = ("ref_in_flight",)  # recorded, not part of `total` (contracts section 3)
_memory_log: list[Path] = []  # the phase log of this rank, once started


def vm_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes, from /proc/<pid>/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def start_memory_log(ctx: RankContext) -> None:
    """With VERI_MEASURE_MEMORY=1, start this rank's phase log with the `imports` phase."""
    if os.environ.get("VERI_MEASURE_MEMORY") == "1":
        _memory_log[:] = [ctx.job_dir / "measured" / f"memory-rank-{ctx.rank}.jsonl"]
        _memory_log[0].parent.mkdir(parents=True, exist_ok=True)
        mark_memory("imports")


def mark_memory(phase: str) -> None:
    """End a phase: log VmRSS now and VmHWM (its peak), then reset the peak. No-op if off."""
    if not _memory_log:
        return
    st = vm_status()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS from here on
        reset = True
    except OSError:
        reset = False
    line = {"phase": phase, "rss_bytes": st["VmRSS"], "hwm_bytes": st["VmHWM"]}
    with open(_memory_log[0], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**line, "hwm_reset": reset, "time": time.time()}) + "\n")


def tensor_bytes(t: torch.Tensor | None) -> int:
    """Bytes of the local data of a tensor (a DTensor's local shard)."""
    if t is None:
        return 0
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def on_device(t: torch.Tensor, device: torch.device) -> bool:
    """Whether the local data of `t` lives on `device`'s kind (a rank uses one accelerator):
    cpu_offload keeps shards, gradients and AdamW moments on the host, and AdamW's `step`
    counters are host scalars on CUDA too; none of that is per-GPU memory."""
    local = t.to_local() if isinstance(t, DTensor) else t
    return local.device.type == device.type


def split_bytes(tensors: Iterable[torch.Tensor | None], device: torch.device) -> tuple[int, int]:
    """(bytes on `device`, bytes elsewhere: the host) of the tensors' local data."""
    here = away = 0
    for t in tensors:
        if t is None:
            continue
        if on_device(t, device):
            here += tensor_bytes(t)
        else:
            away += tensor_bytes(t)
    return here, away


def _is_sharded(t: torch.Tensor) -> bool:
    return isinstance(t, DTensor)


class StateMeter:
    """Collects the components during one step and writes them once."""

    def __init__(self, ctx: RankContext, step: int, device: torch.device | None = None) -> None:
        self.ctx = ctx
        self.step = step
        self.device = device or torch.device("cpu")
        self.enabled = os.environ.get("VERI_MEASURE_STATES") == "1"
        self.values: dict[str, int] = {}
        self.host: dict[str, int] = {}  # what lives off the device (cpu_offload), not in total

    def _count(self, key: str, tensors: Iterable[torch.Tensor | None]) -> None:
        self.values[key], away = split_bytes(tensors, self.device)
        if away:
            self.host[key] = away

    def active(self, step: int) -> bool:
        """Whether `step` (1-based) is the measured one."""
        return self.enabled and step == self.step

    def after_forward(self, model: nn.Module, zero_stage: int) -> None:
        """Stage 2: the compute copy is the set of parameters currently unsharded."""
        if zero_stage == 2:
            self._count("compute_copy", [p for p in model.parameters() if not _is_sharded(p)])

    def reference_hook(self, ref: nn.Module) -> Any:
        """Watch the reference's units in flight; returns a (no-op) forward hook.

        A forward hook runs after FSDP2 resharded the layer, so the watching is done by
        pre-forward hooks (after FSDP2's unshard) on every decoder layer: the most gathered
        at once is kept.
        """
        from veri_tui.trainer.model import decoder_layers

        def watch(*_: Any) -> None:
            params = list(ref.parameters())  # FSDP2 swaps the gathered ones in and out
            if any(map(_is_sharded, params)):
                now = sum(tensor_bytes(p) for p in params if not _is_sharded(p))
                self.values["ref_in_flight"] = max(now, self.values.get("ref_in_flight", 0))

        for layer in decoder_layers(ref):
            layer.register_forward_pre_hook(watch)
        return lambda *_: None

    def after_backward(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Params, grads and optimizer states as they are held after backward."""
        params = list(model.parameters())
        self._count("params", params)
        self._count("grads", [p.grad for p in params])
        states = [v for st in optimizer.state.values() for v in st.values()]
        self._count("optimizer", [v for v in states if torch.is_tensor(v)])

    def reference_rest(self, ref: nn.Module | None, zero_stage: int) -> None:
        """What the reference keeps between its forwards (whole at stage 0, else its shards)."""
        if ref is not None:
            self._count("reference", ref.parameters())

    def write(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """measured/rank-<r>.json with every component and their total."""
        record: dict[str, Any] = {"rank": self.ctx.rank, "step": self.step, **self.values}
        record["total"] = sum(v for k, v in self.values.items() if k not in TRANSIENT)
        record["host"] = dict(self.host)  # on the host (cpu_offload, step counters): not in total
        record.update(extra or {})
        path = self.ctx.job_dir / "measured" / f"rank-{self.ctx.rank}.json"
        write_text_atomic(path, json.dumps(record))
        return record
