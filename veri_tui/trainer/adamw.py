"""AdamW for bf16 weights whose updates land: stochastic rounding of weights and moments.

precision bf16 keeps bf16 weights and bf16 AdamW moments (contracts section 3: 8 bytes per
parameter). Rounded to nearest, an update smaller than half a bf16 step of its weight (2^-9
of it) is lost: at lr 2e-5 most weights of a model initialised at std 0.02 never move, and
the second moment, decayed by 0.999 a step, stops changing. This optimizer does AdamW's
arithmetic in fp32, then rounds the new weight and moments to bf16 stochastically: up with
probability equal to the fraction of a bf16 step the value lies above the lower neighbour.
The rounding is unbiased, so an update of a tenth of a step lands in one step out of ten and
weight decay takes effect in expectation (docs/trainer.md, Precision).

The random bits are a hash of (seed, step, parameter index, element index in the WHOLE
parameter) computed for the rank's own elements only (veri_tui/trainer/adamw_kernel.py), so
DDP replicas round identically (their weights stay equal), and DDP, FSDP2 at either stage
and one process make the same update from the same gradient. The update runs one of three
ways, picked from facts every rank shares (the device type, the compilers present, the
model's parameter count), so all ranks run the same one:

- "native": parameters in host memory (a CPU run; cpu_offload's host step): one C loop over
  the whole group, on the rank's threads (veri_tui/trainer/adamw_native.py); no temporary.
- "compiled": CUDA with Triton and at least COMPILE_MIN_PARAMETERS: `update_` compiled by
  torch.compile into one kernel, launched once per parameter; no temporary.
- "eager": anywhere else: `update_`'s torch ops over batches of at most CHUNK elements
  (veri_tui/trainer/adamw_batch.py); STEP_TEMP_BYTES per element of one batch.

veri_tui/trainer/adamw_regions.py places each rank's elements in their parameters. With
cpu_offload the native way's work runs beside the next forward, unit by unit, when the loop
gives the optimizer an `overlap` (veri_tui/trainer/adamw_overlap.py); `wait` settles it.

veri_tui/plan/peak.py counts the step's temporary of the way the GPU runs (SR_STEP_TEMP_BYTES,
SR_CHUNK, SR_COMPILE_MIN_PARAMETERS) and veri_tui/plan/throughput.py its time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial
from typing import Any

import torch
from torch._subclasses.fake_tensor import is_fake
from torch.optim.adamw import adamw as torch_adamw
from torch.utils._python_dispatch import _get_current_dispatch_mode

from veri_tui.trainer import adamw_native
from veri_tui.trainer.adamw_batch import CHUNK, STEP_TEMP_BYTES, Piece, run_batched
from veri_tui.trainer.adamw_kernel import (
    compiled_update,
    keyed_update_,
    triton_present,
)
from veri_tui.trainer.adamw_overlap import Overlap
from veri_tui.trainer.adamw_regions import Regions, key, local_region

__all__ = ["CHUNK", "STEP_TEMP_BYTES", "StochasticAdamW", "make_optimizer", "local_region"]
# Below this many parameters (the whole model's, the same on every rank) the eager batches
# cost a GPU a few milliseconds a step, not worth torch.compile's tens of seconds at start.
COMPILE_MIN_PARAMETERS = 1 << 25
WAYS = ("native", "compiled", "eager")


class StochasticAdamW(torch.optim.Optimizer):
    """AdamW (torch's formula: decoupled decay, bias-corrected moments) for bf16 parameters,
    with the new weight, m and v rounded stochastically to bf16.

    Parameters of another dtype get torch's AdamW. `seed` makes the rounding deterministic:
    the same seed, step, gradients and parameter order give the same weights, on any number
    of ranks. `way`: one of WAYS to force it (tests, benchmarks; "compiled" also runs on
    CPU, through torch.compile's C++ backend), None to pick it (the module's docstring).
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        seed: int = 0,
        way: str | None = None,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"bf16 AdamW: invalid lr={lr}, betas={betas}, eps={eps}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        if way is not None and way not in WAYS:
            raise ValueError(f"bf16 AdamW: way {way!r} is not one of {', '.join(WAYS)}")
        self.seed, self.way = seed, way
        self._host = adamw_native.HostKernel()
        self._regions = Regions(seed)
        self.overlap: Overlap | None = None  # the host step beside the next forward

    def wait(self) -> None:
        """Block until an overlapped update is done (adamw_overlap.py); no-op otherwise."""
        if self.overlap is not None:
            self.overlap.wait()

    def state_dict(self) -> dict[str, Any]:
        """torch's, once an overlapped update is done."""
        self.wait()
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's, dropping the cached views of the states it replaces (else kept alive)."""
        self.wait()
        self._regions = Regions(self.seed)
        super().load_state_dict(state_dict)

    def pick_way(self, device: torch.device) -> str:
        """The way this optimizer's update runs for parameters on `device` (module docstring)."""
        if self.way is None:
            every = [p for g in self.param_groups for p in g["params"]]
            big = sum(p.numel() for p in every) >= COMPILE_MIN_PARAMETERS
            if device.type == "cpu" and adamw_native.load() is not None:
                self.way = "native"
            elif device.type == "cuda" and big and triton_present():
                self.way = "compiled"
            else:
                self.way = "eager"
        return self.way

    def describe(self) -> str:
        """The run log's line: which way the update runs, and why not a faster one."""
        params = [p for g in self.param_groups for p in g["params"]]
        device = local_region(params[0])[0].device
        way = self.pick_way(device)
        if way == "native":
            how = f"the host's C kernel on {torch.get_num_threads()} thread(s)"
        elif way == "compiled":
            how = "one compiled kernel per parameter (torch.compile)"
        elif device.type == "cpu":
            how = f"eager torch ops ({adamw_native.why or 'forced'})"
        else:
            how = f"eager torch ops in batches of {CHUNK:,} elements"
        return f"optimizer: bf16 AdamW with stochastic rounding, {way}: {how}"

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One AdamW step over every parameter that has a gradient."""
        self.wait()  # the last step's overlapped update, if any (every forward waited on it)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        # The host kernel's work per overlap unit, when overlapped: (pieces, hyper, key).
        deferred: list[list[tuple[list[Piece], list[float], int]]] | None = None
        if self.overlap is not None:
            deferred = [[] for _ in range(self.overlap.count)]
        for group in self.param_groups:
            rounded: list[tuple[Any, Any, int]] = []
            other: list[tuple[Any, Any, int]] = []
            for p in group["params"]:
                index += 1  # counts every parameter: the keys do not depend on which have grads
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                (rounded if p.dtype == torch.bfloat16 else other).append((p, state, index))
            if rounded:
                self._rounded(group, rounded, deferred)
            if other:
                _torch_adamw(group, [p for p, _, _ in other], [s for _, s, _ in other])
        if self.overlap is not None and deferred is not None and any(deferred):
            self.overlap.start([partial(_run_host, self._host, work) for work in deferred])
        return loss

    def _rounded(
        self,
        group: dict[str, Any],
        items: list[tuple[Any, Any, int]],
        deferred: list[list[tuple[list[Piece], list[float], int]]] | None = None,
    ) -> None:
        steps = [state["step"] for _, state, _ in items]
        torch._foreach_add_(steps, 1)
        counts = [int(s) for s in torch.stack(steps).tolist()]
        first = local_region(items[0][0])[0]
        device, way = first.device, self.pick_way(first.device)
        if way == "native" and is_fake(first):  # fake CUDA's offload (a trace): no memory
            way = "eager"
        by_step: dict[int, list[Piece]] = {}
        units = self.overlap.unit_of if self.overlap is not None and way == "native" else {}
        unit_of: dict[int, int] = {}  # id(piece) -> its overlap unit
        for (p, state, index), step in zip(items, counts, strict=True):
            got = self._regions.pieces(p, state, index, device, way)
            by_step.setdefault(step, []).extend(got)
            if id(p) in units:
                unit_of.update((id(piece), units[id(p)]) for piece in got)
        for step, pieces in by_step.items():
            hyper, step_key = hyper_values(group, step), key(self.seed, step)
            if way != "eager":  # a gradient not in bf16 (rare) goes the eager way
                eager = [p for p in pieces if p.g.dtype != torch.bfloat16]
                pieces = [p for p in pieces if p.g.dtype == torch.bfloat16]
                run_batched(eager, hyper, step_key)
            if way == "native" and deferred is not None and unit_of:
                for unit in range(len(deferred)):  # the unit's share, run beside the forward
                    mine = [p for p in pieces if unit_of.get(id(p)) == unit]
                    if mine:
                        deferred[unit].append((mine, hyper, step_key))
                rest = [p for p in pieces if id(p) not in unit_of]
                if rest:  # in no unit: updated now
                    self._host.run(rest, hyper, step_key)
            elif way == "native":
                self._host.run(pieces, hyper, step_key)
            elif way == "compiled":
                self._run_compiled(pieces, hyper, step_key, device)
            else:
                run_batched(pieces, hyper, step_key)

    def _run_compiled(
        self, pieces: list[Piece], values: list[float], step_key: int, device: torch.device
    ) -> None:
        """The compiled kernel, once per piece (its Python, the same ops eagerly, under a
        dispatch mode such as a memory census: torch.compile refuses to run under one)."""
        hyper = torch.tensor(values, dtype=torch.float32, device=device)
        skey = torch.tensor(step_key, dtype=torch.int32, device=device)
        update: Any = keyed_update_ if _get_current_dispatch_mode() else compiled_update()
        for piece in pieces:
            update(piece.w, piece.g, piece.m, piece.v, hyper, piece.keys, skey)


def _run_host(
    host: adamw_native.HostKernel, work: list[tuple[list[Piece], list[float], int]]
) -> None:
    """One overlap unit's share of the step (its pieces, per step count)."""
    for pieces, hyper, step_key in work:
        host.run(pieces, hyper, step_key)


def hyper_values(group: dict[str, Any], step: int) -> list[float]:
    """The kernel's scalars (adamw_kernel.HYPER's order) for `step` (1-based)."""
    b1, b2 = group["betas"]
    lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
    inv_root2 = 1 / math.sqrt(1 - b2**step)
    return [1 - lr * decay, b1, 1 - b1, b2, 1 - b2, inv_root2, eps, -lr / (1 - b1**step)]


def _torch_adamw(group: dict[str, Any], params: list[Any], states: list[Any]) -> None:
    """torch's AdamW, for parameters that are not bf16 (written back unrounded)."""
    beta1, beta2 = group["betas"]
    torch_adamw(
        params, [p.grad for p in params], [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states], [], [s["step"] for s in states],
        amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
        weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
    )  # fmt: skip


def make_optimizer(
    params: list[torch.nn.Parameter],
    lr: float,
    weight_decay: float,
    seed: int,
    beta2: float = 0.999,
    beta1: float = 0.9,
) -> torch.optim.Optimizer:
    """The run's AdamW: stochastically rounded when any trained parameter is bf16 (precision
    bf16, full fine-tune), else torch's (fp32 master weights, fp32 LoRA adapters)."""
    betas = (beta1, beta2)
    if any(p.dtype == torch.bfloat16 for p in params):
        return StochasticAdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, seed=seed)
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay)
