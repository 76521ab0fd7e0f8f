"""Live tensor memory, op counts, FLOPs and bytes of a traced step, per phase.

A TorchDispatchMode entered inside the trace's FakeTensorMode: it sees every aten op the
trainer's code runs (after DTensor has turned its ops into local ones) and every storage
they create. Memory is the caching allocator's view of live tensors: each storage counted
from its creation until Python frees it (a weakref callback), rounded up to 512 bytes on
CUDA as the allocator rounds (torch's MemTracker does the same); storages FSDP2 frees and
re-allocates by `UntypedStorage.resize_` are followed through it. Not counted: what a real
GPU adds beside the tensors (the CUDA context, NCCL and cuBLAS workspaces, the allocator's
cached and fragmented blocks: docs/trace.md).

Phases: the caller names `load`, `eval` and `checkpoint`; inside a training step an op is
`backward` while the autograd engine runs a graph task, `optimizer step` between the
optimizer's step hooks, else `forward` (which then also holds the step's bookkeeping around
the model: the batch's copy to the GPU, the token count's all-reduce, gradient clipping).

At the CUDA peak the live bytes are kept by what holds them: `weights` (made while loading:
parameters, their shards, buffers, a DPO reference), `gathered` (FSDP2's unsharded
parameters and its collectives' buffers), `gradients`, `optimizer` (AdamW's states),
`activations` (made in the forward), `temporaries` (made in backward or the step, not kept),
`eval`. Gradients and optimizer states are told apart when the optimizer step begins and
ends (`retag`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

ROUND = 512  # the caching allocator's smallest block (torch's MemTracker: _PYTORCH_MIN_ALLOCATE)
PHASES = ("load", "forward", "backward", "optimizer step", "eval", "checkpoint")
CATEGORY_OF_PHASE = {
    "load": "weights", "forward": "activations", "backward": "temporaries",
    "optimizer step": "temporaries", "eval": "eval", "checkpoint": "temporaries",
}  # fmt: skip
_GATHER_NAMESPACES = ("fsdp", "_c10d_functional", "c10d")
_FAKE = torch._C._TorchDispatchModeKey.FAKE
# One per FSDP2 unit: its all-gather in the forward, its reduce-scatter in the backward.
_UNIT_OPS = {"forward": "all_gather_copy_in", "backward": "_reduce_scatter_base_"}


class PhaseStats:
    """One phase's CUDA peak and its op counts, FLOPs and bytes moved."""

    def __init__(self) -> None:
        self.peak = 0
        self.ops: dict[str, int] = {}
        self.flops = 0
        self.bytes = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (`trace.phases` of `veri-tui plan --json --trace`)."""
        return {
            "peak_allocated_bytes": self.peak,
            "ops": sum(self.ops.values()),
            "flops": self.flops,
            "bytes": self.bytes,
            "op_counts": dict(sorted(self.ops.items(), key=lambda kv: -kv[1])),
        }


def _tensors(values: Iterable[Any]) -> Iterable[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (x for x in v if isinstance(x, torch.Tensor))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


# TorchDispatchMode's __init_subclass__, __init__, __enter__ and __exit__ are unannotated
# in torch: the calls are untyped to mypy (veri_tui/trainer/census.py does the same).
class Tracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts as described in the module docstring; `phase` is set by the caller.

    Not census.py's Census: that keeps the set of live storages after every op (to take
    any stretch's peak afterwards), linear in the live tensors per op; a traced step runs
    80,000 ops over thousands of tensors. This keeps running totals only."""

    def __init__(self, detail: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.detail = detail
        #: With `detail`: at the CUDA peak, every live storage (bytes, holder, op, phase).
        self.peak_detail: list[tuple[int, str, str, str]] = []
        self.phase = "load"
        self.in_step = False
        self.in_optimizer = False
        self.stats = {p: PhaseStats() for p in PHASES}
        self.current = {"cuda": 0, "cpu": 0}
        self.peak = {"cuda": 0, "cpu": 0}
        self.by_category: dict[str, int] = {}
        self.peak_categories: dict[str, int] = {}
        self.peak_phase = "load"
        self.peak_op = ""
        self.last_op: Any = None  # the last op that ran (a failure between ops: after it)
        #: Decoder layers of the model (the trace sets it): `where_peaks` needs it.
        self.layers = 1
        #: Each phase's peak at its first layer, at its last layer and in between ((phase,
        #: "first" | "middle" | "last"): `_where`): what a trace at a few layers extrapolates
        #: to all of them (docs/trace.md, The depth).
        self.where_peaks: dict[tuple[str, str], int] = {}
        self._units_phase, self._units = "", 0
        # id(storage) -> [bytes, device, holder, weakref, the op that made it, its phase]
        self._live: dict[int, list[Any]] = {}
        self._resize = torch.UntypedStorage.resize_
        self._fake: Any = None

    # --- phases -----------------------------------------------------------------------
    def _phase(self) -> str:
        if not self.in_step:
            return self.phase
        if torch._C._current_graph_task_id() != -1:
            return "backward"
        return "optimizer step" if self.in_optimizer else "forward"

    # --- storages -----------------------------------------------------------------------
    def _add(self, st: Any, device: str, category: str, op: str = "") -> None:
        key = id(st)
        if key in self._live:
            return
        size = -(-st.nbytes() // ROUND) * ROUND if device == "cuda" else st.nbytes()
        entry = [size, device, category, None, op, self._phase()]
        entry[3] = weakref.ref(st, functools.partial(self._freed, key))
        self._live[key] = entry
        self._count(entry, +1)

    def _freed(self, key: int, _: object) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self._count(entry, -1)

    def _count(self, entry: list[Any], sign: int) -> None:
        size, device, category = entry[0], entry[1], entry[2]
        self.current[device] = self.current.get(device, 0) + sign * size
        if device == "cuda":
            self.by_category[category] = self.by_category.get(category, 0) + sign * size

    def retag(self, tensors: Iterable[torch.Tensor | None], category: str) -> None:
        """Count these tensors' storages under `category` from now on."""
        for t in tensors:
            if t is None:
                continue
            local = t.to_local() if isinstance(t, DTensor) else t
            entry = self._live.get(id(local.untyped_storage()))
            if entry is not None and entry[2] != category:
                self._count(entry, -1)
                entry[2] = category
                self._count(entry, +1)

    def _resized(self, st: Any, size: int) -> None:
        self._resize(st, size)
        entry = self._live.get(id(st))
        if entry is None:
            return
        self._count(entry, -1)
        entry[0] = -(-st.nbytes() // ROUND) * ROUND if entry[1] == "cuda" else st.nbytes()
        entry[2] = "gathered"
        self._count(entry, +1)
        self._peaks("resize_")

    def _where(self, phase: str) -> str:
        """Where a forward or backward is, by the FSDP2 units it has gathered (the root's,
        then one per layer) or reduced (one per layer, then the root's): at its first layer
        (with the loss and the root before it in backward, the root and embedding in
        forward), at its last (and the head, or the root's reduction), or in between. DDP
        and one process have no units: all of it is "first". Other phases: "first"."""
        units, layers = self._units, self.layers
        if phase == "forward":
            return "first" if units <= 2 else "last" if units >= layers + 1 else "middle"
        if phase == "backward":
            return "first" if units == 0 else "last" if units >= layers - 1 else "middle"
        return "first"

    def _peaks(self, op: str) -> None:
        phase = self._phase()
        cuda = self.current["cuda"]
        stats = self.stats[phase]
        stats.peak = max(stats.peak, cuda)
        where = (phase, self._where(phase))
        self.where_peaks[where] = max(self.where_peaks.get(where, 0), cuda)
        self.peak["cpu"] = max(self.peak["cpu"], self.current["cpu"])
        if cuda > self.peak["cuda"]:
            if self.detail:  # what each live storage is, at every new peak (costly: tests)
                self.peak_detail = sorted(
                    ((e[0], e[2], e[4], e[5]) for e in self._live.values() if e[1] == "cuda"),
                    reverse=True,
                )
            self.peak["cuda"] = cuda
            self.peak_categories = {k: v for k, v in self.by_category.items() if v}
            self.peak_phase, self.peak_op = phase, op

    # --- the mode -------------------------------------------------------------------------
    def __enter__(self) -> Tracker:
        def resize_(st: Any, size: int) -> None:  # a function: the class attribute binds it
            self._resized(st, size)

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
        self._fake = torch._C._get_dispatch_mode(_FAKE)  # the trace's mode, entered before
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *args: Any) -> None:
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*args)  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if any(t is DTensor for t in types):
            return NotImplemented  # let DTensor turn it into local ops first
        kwargs = kwargs or {}
        if torch._C._get_dispatch_mode(_FAKE) is not self._fake:
            # DTensor's sharding propagation: global-shape shadow ops in its own fake mode
            # (runtime.py), no memory and no kernel of the step's (cached after first use,
            # so counting them would also make a process's first trace differ).
            return func(*args, **kwargs)
        phase = self._phase()
        try:
            out = func(*args, **kwargs)
        except Exception as exc:  # a device mismatch, a missing kernel: name the op
            exc.add_note(f"fake CUDA trace: raised by {func} in the {phase} phase")
            raise
        self.last_op = func
        if func is torch.ops.prim.device.default:
            return out
        stats = self.stats[phase]
        name = str(func.overloadpacket.__name__)
        stats.ops[name] = stats.ops.get(name, 0) + 1
        if phase != self._units_phase:  # a forward or backward begins: no unit done yet
            self._units_phase, self._units = phase, 0
        if name == _UNIT_OPS.get(phase):
            self._units += 1
        outs = list(_tensors(out if isinstance(out, (list, tuple)) else (out,)))
        stats.bytes += sum(map(_nbytes, _tensors(args))) + sum(map(_nbytes, outs))
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            stats.flops += int(formula(*args, **kwargs, out_val=out))
        gathered = func.namespace in _GATHER_NAMESPACES
        category = "gathered" if gathered else CATEGORY_OF_PHASE[phase]
        for t in outs:
            self._add(t.untyped_storage(), t.device.type, category, name)
        self._peaks(name)
        return out

    def summary(self) -> dict[str, Any]:
        """The figures: the CUDA peak, what held it, when; the host peak; per phase."""
        return {
            "peak_allocated_bytes": self.peak["cuda"],
            "peak_phase": self.peak_phase,
            "peak_op": self.peak_op,
            "peak_by_holder": dict(sorted(self.peak_categories.items(), key=lambda kv: -kv[1])),
            "host_peak_bytes": self.peak["cpu"],
            "phases": {p: s.to_dict() for p, s in self.stats.items() if s.ops or s.peak},
        }
