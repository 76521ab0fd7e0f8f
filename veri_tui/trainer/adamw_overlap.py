"""cpu_offload's host step overlapped with the next forward (issue 34 item 2).

With cpu_offload each rank updates its host shards after the last backward, and the next
forward needs the updated weights, but only unit by unit: FSDP2 copies a unit's host shard
to the GPU in that unit's pre-forward hook (its all-gather), the root's (embedding, final
norm, head) first, then each decoder layer's as the forward reaches it. So the update runs
on a background thread in that order, one unit after the other, and each unit's forward
waits for its own update only: the GPU runs layer i's forward while the host updates layers
i + 1 onward. Nothing else waits less: every reader of the weights or the states other than
a forward waits for the whole update (the optimizer's next step, its state_dict, the
model's state_dict, the canary's step post-hook, the artifact).

`Overlap` is the background thread and its events; `install` puts the waits on the model.
veri_tui/trainer/adamw.py's StochasticAdamW defers its host kernel's work here when given
an Overlap (the native way only: the C kernel releases the GIL, so the forward's Python runs
beside it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import nn


class Overlap:
    """The update of the units (lists of parameters, in forward order) on a background
    thread, one job a unit, and the waits for it."""

    def __init__(self, units: Sequence[Sequence[torch.Tensor]]) -> None:
        self.unit_of = {id(p): i for i, params in enumerate(units) for p in params}
        self.count = len(units)
        self._done: list[threading.Event] = []
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, jobs: list[Callable[[], None]]) -> None:
        """Run `jobs` (one a unit, in unit order) on a new background thread."""
        self.wait()
        if len(jobs) != self.count:
            raise ValueError(f"overlap: {len(jobs)} jobs for {self.count} units")
        self._done = [threading.Event() for _ in jobs]

        def work() -> None:
            try:
                with torch.no_grad():
                    for job, done in zip(jobs, self._done, strict=True):
                        job()
                        done.set()
            except BaseException as exc:  # noqa: BLE001 - raised again on the main thread
                self._error = exc
            finally:
                for done in self._done:
                    done.set()  # a failed update wakes every waiter, who raises it

        self._thread = threading.Thread(target=work, name="veri-adamw-overlap", daemon=True)
        self._thread.start()

    def finished(self, unit: int) -> bool:
        """Whether `unit`'s update of the last step is done (True with none started)."""
        return self._thread is None or self._done[unit].is_set()

    def pending(self) -> bool:
        """Whether some unit's update has not finished."""
        return self._thread is not None and not all(d.is_set() for d in self._done)

    def wait(self, unit: int | None = None) -> None:
        """Block until `unit`'s update (None: every unit's) is done; raise its error."""
        thread = self._thread
        if thread is None:
            return
        if unit is None:
            thread.join()
            self._thread = None
        else:
            self._done[unit].wait()
        if self._error is not None:
            error, self._error, self._thread = self._error, None, None
            raise error


def model_units(model: nn.Module, layers: Sequence[nn.Module]) -> list[list[torch.Tensor]]:
    """The trained parameters by FSDP2 unit in forward order: the root's own (those in no
    layer: embedding, final norm, head), then each layer's."""
    inside = {id(p) for layer in layers for p in layer.parameters()}
    root: list[torch.Tensor] = [p for p in model.parameters() if id(p) not in inside]
    return [root, *(list[torch.Tensor](layer.parameters()) for layer in layers)]


def install(model: nn.Module, layers: Sequence[nn.Module], overlap: Overlap) -> list[Any]:
    """Each unit's forward waits for its update, ahead of FSDP2's own pre-forward hook (the
    copy of its host shard); the model's state_dict waits for the whole update. Returns the
    hooks' handles."""
    handles = [model.register_forward_pre_hook(lambda *_: overlap.wait(0), prepend=True)]
    for i, layer in enumerate(layers, start=1):
        hook = _unit_wait(overlap, i)
        handles.append(layer.register_forward_pre_hook(hook, prepend=True))
    # unannotated in torch: a model's state_dict (a checkpoint's) reads the updated weights
    register = cast(Callable[..., Any], model.register_state_dict_pre_hook)
    handles.append(register(lambda *_a, **_k: overlap.wait()))
    return handles


def _unit_wait(overlap: Overlap, unit: int) -> Callable[..., None]:
    def hook(*_: Any) -> None:
        overlap.wait(unit)

    return hook


def overlap_forward(model: nn.Module, layers: Sequence[nn.Module], opt: Any) -> list[Any]:
    """Give `opt` (a StochasticAdamW whose update runs on the host) an Overlap over the
    model's units and put the waits on the model; the hooks' handles."""
    overlap = Overlap(model_units(model, layers))
    opt.overlap = overlap
    return install(model, layers, overlap)


def settle(opt: Any) -> None:
    """Wait for `opt`'s overlapped update, if it has one (any optimizer)."""
    wait = getattr(opt, "wait", None)
    if wait is not None:
        wait()
