"""What the canary measures inside one step: the time of each phase and the memory of each
of the plan's terms (veri_tui/trainer/canary.py runs it on its steps; veri_tui/plan/peak.py names
the terms).

The step's phases come from the progress marks the loop already makes (`forward`,
`backward`, `optimizer`): `PhaseClock` stands in for the rank's `Progress`, passes every
mark on, and notes the time (after a CUDA synchronize: kernels are asynchronous) and a
memory point at each. Memory points come from the device's own counter:

- CUDA (`CudaPoints`): the caching allocator's peak since the previous point (read, then
  reset; the run's peak is kept in veri_tui/trainer/peakmem.py) and what is allocated now;
- CPU (`veri_tui.trainer.census.Census`, first canary step only: it slows every op): the storages
  alive after every op, gradients and optimizer states left out by storage.

From those, per step: `beyond_states` (the peak from the first forward to the optimizer,
beyond the states: on CUDA the peak less the states' bytes, on CPU the census's peak less
the gradients), `loss` (the peak from the output layer's forward to the backward,
less what was alive before it: the logits and the loss's chunk), `optimizer_step` (the peak
of the update beyond what was alive before it, less optimizer states it created). Units in
flight are counted from the parameters themselves (FSDP2 swaps gathered ones in): the most
unsharded bytes seen as a decoder layer starts, at zero_stage 3 only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from veri_tui.jobfolder.supervise.progress import Progress
from veri_tui.trainer.census import Census
from veri_tui.trainer.measure import tensor_bytes
from veri_tui.trainer.peakmem import _RUN


class CudaPoints:
    """Memory points on CUDA: each closes a window (its peak) and notes what is allocated."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peaks: list[int] = []  # window i: the peak between point i-1 and point i
        self.alive: list[int] = []
        self.used: int = 0  # the device's own used bytes, the most seen at a point

    def point(self) -> int:
        peak = int(torch.cuda.max_memory_allocated(self.device))
        _RUN[0] = max(_RUN[0], peak)
        _RUN[1] = max(_RUN[1], int(torch.cuda.max_memory_reserved(self.device)))
        torch.cuda.reset_peak_memory_stats(self.device)
        free, total = torch.cuda.mem_get_info(self.device)
        self.used = max(self.used, total - free)
        self.peaks.append(peak)
        self.alive.append(int(torch.cuda.memory_allocated(self.device)))
        return len(self.alive) - 1

    def peak(self, since: int, until: int, drop: frozenset[int] = frozenset()) -> int:
        return max(self.peaks[since + 1 : until + 1], default=0)

    def serials(self, tensors: list[torch.Tensor]) -> frozenset[int]:
        return frozenset()  # the allocator's peak cannot leave tensors out

    def alive_at(self, i: int) -> int:
        return self.alive[i]


class CensusPoints:
    """Memory points on CPU, from a census of the storages ops create
    (veri_tui/trainer/census.py)."""

    def __init__(self) -> None:
        self.census = Census()
        cast(Callable[[], object], self.census.__enter__)()  # unannotated in torch

    def point(self) -> int:
        return self.census.index()

    def close(self) -> None:
        cast(Callable[[None, None, None], object], self.census.__exit__)(None, None, None)

    def serials(self, tensors: list[torch.Tensor]) -> frozenset[int]:
        """The census's serials of the (live) storages of ``tensors``."""
        live = self.census.live
        return frozenset(live[k][2] for k in map(_storage, tensors) if k in live)

    def peak(self, since: int, until: int, drop: frozenset[int] = frozenset()) -> int:
        sizes, stretch = self.census.sizes, self.census.timeline[since:until]
        return max((sum(sizes[s] for s in live if s not in drop) for live in stretch), default=0)

    def alive_at(self, i: int) -> int:
        return sum(self.census.sizes[s] for s in self.census.timeline[i - 1]) if i > 0 else 0


def _storage(t: torch.Tensor) -> int:
    local = t.to_local() if isinstance(t, DTensor) else t
    return int(local.untyped_storage()._cdata)


class PhaseClock(Progress):
    """The rank's `Progress`, noting each mark's time (and memory point) while `active`."""

    def __init__(self, inner: Progress, device: torch.device) -> None:
        self.inner, self.device = inner, device
        self.points: CudaPoints | CensusPoints | None = None
        self.active = False  # in a canary step: marks are timed (and measured with points)
        self.marks: list[tuple[str, float, int]] = []
        self.params: list[nn.Parameter] = []  # whose gradients the census leaves out
        self.grads: frozenset[int] = frozenset()  # their serials, taken at `optimizer`

    @property
    def seq(self) -> int:  # type: ignore[override]
        return self.inner.seq

    def note(self, phase: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        point = self.points.point() if self.points is not None else -1
        self.marks.append((phase, time.perf_counter(), point))
        if phase == "optimizer" and self.points is not None:  # before zero_grad frees them
            grads = [p.grad for p in self.params if p.grad is not None]
            self.grads = self.points.serials(grads)

    def mark(self, phase: str, step: int | None = None) -> None:
        if self.active:
            self.note(phase)
        self.inner.mark(phase, step)

    def close(self) -> None:
        self.inner.close()


def split_times(marks: list[tuple[str, float, int]]) -> dict[str, float]:
    """data / forward+backward / optimizer / after_update seconds of one step's marks
    (`start` ... `end`): the optimizer's from its mark (clipping, then the update) to
    `updated` (the optimizer's step post-hook), then the rest (the loss's all-reduce)."""
    at: dict[str, float] = {}
    for phase, t, _ in marks:
        at.setdefault(phase, t)
    end = marks[-1][1]
    updated = at.get("updated", end)
    return {
        "data": at["forward"] - at["start"],
        "forward_backward": at["optimizer"] - at["forward"],
        "optimizer": updated - at["optimizer"],
        "after_update": end - updated,
    }


def step_memory(
    marks: list[tuple[str, float, int]],
    points: CudaPoints | CensusPoints,
    states: int,
    grads: frozenset[int],
    created: list[torch.Tensor],
) -> dict[str, int]:
    """The step's `beyond_states` (the forward/backward peak beyond the states: activations,
    logits, units in flight), `loss` and `optimizer_step` bytes from its memory points.
    ``states``: the states' bytes (CUDA's peak holds them; the census never saw them),
    ``grads``: the gradients' serials (the census's), ``created``: optimizer states this
    step's update made."""
    first = next(p for ph, _, p in marks if ph == "forward")
    opt = next(p for ph, _, p in marks if ph == "optimizer")
    end = marks[-1][2]
    census = isinstance(points, CensusPoints)
    out = {"beyond_states": max(points.peak(first, opt, grads) - (0 if census else states), 0)}
    loss = 0
    for i, (phase, _, p) in enumerate(marks):
        if phase == "output_layer":
            stop = next((q for ph, _, q in marks[i:] if ph == "backward"), opt)
            loss = max(loss, points.peak(p, stop) - points.alive_at(p))
    out["loss"] = max(loss, 0)
    made = points.serials(created)
    new = 0 if census else sum(tensor_bytes(t) for t in created)
    out["optimizer_step"] = max(points.peak(opt, end, made) - points.alive_at(opt) - new, 0)
    return out


def watch_units(model: nn.Module, layers: list[nn.Module], seen: list[int]) -> list[Any]:
    """Pre-forward hooks noting the most unsharded parameter bytes as each layer starts."""

    def note(*_: Any) -> None:
        params = list(model.parameters())
        if any(isinstance(p, DTensor) for p in params):
            seen[0] = max(seen[0], sum(tensor_bytes(p) for p in params
                                       if not isinstance(p, DTensor)))  # fmt: skip

    return [layer.register_forward_pre_hook(note) for layer in layers]
