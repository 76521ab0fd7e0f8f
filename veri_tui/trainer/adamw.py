"""AdamW for bf16 weights whose updates land: stochastic rounding of weights and moments.

precision bf16 keeps bf16 weights and bf16 AdamW moments (contracts section 3: 8 bytes per
parameter). Rounded to nearest, an update smaller than half a bf16 step of its weight (2^-9
of it) is lost: at lr 2e-5 most weights of a model initialised at std 0.02 never move, and
the second moment, decayed by 0.999 a step, stops changing. This optimizer does AdamW's
arithmetic in fp32, then rounds the new weight and moments to bf16 stochastically: up with
probability equal to the fraction of a bf16 step the value lies above the lower neighbour.
The rounding is unbiased, so an update of a tenth of a step lands in one step out of ten and
weight decay takes effect in expectation (docs/trainer.md, Precision).

The random bits are a function of (seed, step, parameter index, element index in the WHOLE
parameter) only: each rank draws the chunks of the whole flattened parameter that overlap its
own rows and keeps its part. So DDP replicas round identically (their weights stay equal),
and DDP, FSDP2 at either stage and one process make the same update from the same gradient.
Work is done on local shards (a DTensor's to_local() view) in chunks of CHUNK elements, so
the step's temporary is bounded (veri_tui/plan/peak.py counts it: STEP_TEMP_BYTES).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

CHUNK = 1 << 22  # elements per random draw and per fp32 working set
# fp32 working copies alive at once per element: weight, gradient, m, v, the denominator
# and the int32 random bits (veri_tui/plan/peak.py's SR_STEP_TEMP_BYTES is the same figure).
STEP_TEMP_BYTES = 24
_LOW16 = (1 << 16) - 1
_HIGH16 = -(1 << 16)  # 0xFFFF0000 as an int32: clears the bits bf16 drops
_MIX = 0x9E3779B97F4A7C15  # splitmix64's increment: spreads consecutive keys apart
_MASK63 = (1 << 63) - 1


def stochastic_round_(dst: torch.Tensor, src: torch.Tensor, bits: torch.Tensor) -> None:
    """Write fp32 `src` into bf16 `dst`, rounded stochastically by `bits` (int32 in
    [0, 2^16), one per element).

    Adding the bits to the low 16 bits of the fp32 pattern carries into the bf16 part with
    probability (low 16 bits) / 2^16, the distance to the lower neighbour in bf16 steps;
    clearing the low bits then leaves an exact bf16 value. Sign-magnitude makes this round
    the magnitude, symmetrically for negative values.
    """
    pattern = src.view(torch.int32).add(bits).bitwise_and_(_HIGH16)
    dst.copy_(pattern.view(torch.float32))


def _key(*parts: int) -> int:
    """A 63-bit generator seed from small integers (splitmix64-style mixing)."""
    x = 0
    for p in parts:
        x = (x + p + _MIX) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & _MASK63


def local_region(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's part of `t` and the flat index, in the whole tensor, where it starts.

    FSDP2 shards dim 0 over a 1-D mesh in torch.chunk pieces (veri_tui/trainer/loading.py reads the
    checkpoint the same way); a replicated DTensor or a plain tensor is whole here.
    """
    from torch.distributed.tensor import DTensor, Shard

    if not isinstance(t, DTensor):
        return t, 0
    local = t.to_local()
    if not any(isinstance(p, Shard) for p in t.placements) or t.dim() == 0:
        return local, 0
    if t.device_mesh.ndim != 1 or t.placements[0] != Shard(0):
        raise ValueError(f"bf16 AdamW: cannot place a shard with placements {t.placements}")
    rows, world = t.shape[0], t.device_mesh.size()
    per = -(-rows // world)
    start = min(t.device_mesh.get_local_rank() * per, rows)
    return local, start * math.prod(t.shape[1:])


class StochasticAdamW(torch.optim.Optimizer):
    """AdamW (torch's formula: decoupled decay, bias-corrected moments) for bf16 parameters,
    with the new weight, m and v rounded stochastically to the parameter's dtype (bf16).

    Parameters of another dtype get the same arithmetic written back unrounded. `seed` makes
    the rounding deterministic: the same seed, step, gradients and parameter order give the
    same weights, on any number of ranks.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        seed: int = 0,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"bf16 AdamW: invalid lr={lr}, betas={betas}, eps={eps}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)
        self.seed = seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device)
        return self._generators[device]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One AdamW step over every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1  # counts every parameter, so the keys do not depend on which have grads
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                self._update(p, state, group, index)
        return loss

    def _update(
        self, p: torch.Tensor, state: dict[str, Any], group: dict[str, Any], index: int
    ) -> None:
        assert p.grad is not None  # step() passes only the parameters that have one
        weight, start = local_region(p)
        tensors = [weight, local_region(p.grad)[0]]
        tensors += [local_region(state[k])[0] for k in ("exp_avg", "exp_avg_sq")]
        flat = [(t if t.is_contiguous() else t.contiguous()).view(-1) for t in tensors]
        key = (self.seed, int(state["step"].item()), index)
        update_region(*flat, start=start, total=p.numel(), key=key, group=group,
                      generator=self._generator(weight.device))  # fmt: skip
        for t, f in zip(tensors, flat, strict=True):
            if f.data_ptr() != t.data_ptr():  # a non-contiguous tensor was worked on a copy
                t.copy_(f.view_as(t))


def update_region(
    weight: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    *,
    start: int,
    total: int,
    key: tuple[int, int, int],
    group: dict[str, Any],
    generator: torch.Generator,
) -> None:
    """AdamW on the flat elements [start, start + len) of a parameter of `total` elements,
    in place. `key` = (seed, step, parameter index): with it, an element's rounding depends on
    its index in the whole parameter, never on where the region begins."""
    seed, step, index = key
    beta1, beta2 = group["betas"]
    lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
    step_size = lr / (1 - beta1**step)
    root2 = math.sqrt(1 - beta2**step)
    rounded = weight.dtype == torch.bfloat16
    end = start + weight.numel()
    for first in range(start - start % CHUNK, end, CHUNK):
        lo, hi = max(first, start), min(first + CHUNK, end)
        w, g, m_, v_ = (t[lo - start : hi - start] for t in (weight, grad, m, v))
        w32, g32 = w.float(), g.float()
        w32.mul_(1 - lr * decay)
        m32 = m_.float().lerp_(g32, 1 - beta1)
        v32 = v_.float().mul_(beta2).addcmul_(g32, g32, value=1 - beta2)
        del g32
        denom = v32.sqrt().div_(root2).add_(eps)
        w32.addcdiv_(m32, denom, value=-step_size)
        del denom
        if not rounded:  # fp32 (or another dtype): written back as computed
            for out, value in ((w, w32), (m_, m32), (v_, v32)):
                out.copy_(value)
            continue
        # The whole chunk's bits are drawn on every rank, so the rounding of an element
        # does not depend on which rank holds it; weight, m and v each get their own.
        generator.manual_seed(_key(seed, step, index, first // CHUNK))
        size = min(CHUNK, total - first)
        for out, value in ((w, w32), (m_, m32), (v_, v32)):
            bits = torch.randint(
                0, _LOW16 + 1, (size,), generator=generator, dtype=torch.int32, device=w.device
            )
            stochastic_round_(out, value, bits[lo - first : hi - first])


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
