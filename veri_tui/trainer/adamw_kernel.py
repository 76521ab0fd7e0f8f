"""The bf16 AdamW's elementwise update, written once in torch ops: AdamW in fp32, random bits
hashed from each element's index, the new weight, m and v rounded stochastically to bf16.

`update_` takes flat bf16 regions, the step's scalars (`hyper`), and for the random bits the
element index where the region starts in its parameter and the parameter's 32-bit key for
this step. veri_tui/trainer/adamw.py runs it two ways:

- compiled (`compiled_update`, on CUDA): torch.compile turns it into one fused Triton kernel
  that reads the four bf16 inputs once, writes the three outputs once and holds no
  temporary; launched once per parameter. (On CPU the same compile gives a C++ kernel, the
  benchmark's and the trial test's check of the graph; the host runs adamw_native.c.)
- eager (veri_tui/trainer/adamw_batch.py): the same ops on a batch of parameters joined into
  one flat tensor, start and key given per element; each op one pass (on a GPU one kernel).

The random bits are a counter-based hash (lowbias32, C. Wellons' 32-bit integer hash) of the
element's index in the WHOLE parameter and the parameter's key, so a shard rounds exactly
as the whole does, with no generator, no state and no lock. int32 throughout (the products
wrap, as the hash wants; arithmetic shifts are masked into logical ones), so both ways and
both devices compute the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

HIGH16 = -(1 << 16)  # 0xFFFF0000 as an int32: clears the bits bf16 drops
LOW16 = (1 << 16) - 1
_M1 = 0x7FEB352D  # lowbias32's multipliers (as int32)
_M2 = 0x846CA68B - (1 << 32)
_SECOND = 0x9E3779B9 - (1 << 32)  # added before the second hash: v's bits from w's and m's
# The hyperparameters' order in `hyper` (veri_tui/trainer/adamw.py's hyper_values).
HYPER = ("decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "inv_root2", "eps",
         "neg_step")  # fmt: skip
UpdateFn = Callable[..., None]
# Bytes per element a fused kernel (compiled, or adamw_native.c) moves: it reads w, g, m, v
# and writes w, m, v, all bf16 (veri_tui/plan/optimizer_time.py's traffic of the update).
KERNEL_BYTES = 14


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int32 (torch's >> is arithmetic: mask the sign's copies off)."""
    return torch.bitwise_right_shift(x, bits).bitwise_and_((1 << (32 - bits)) - 1)


def mix_(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 in place on int32 `x`: a bijection whose every output bit depends on every
    input bit (bias 0.17 of a perfect hash's, by its author's measure)."""
    x.bitwise_xor_(_shr(x, 16))
    x.mul_(_M1)
    x.bitwise_xor_(_shr(x, 15))
    x.mul_(_M2)
    return x.bitwise_xor_(_shr(x, 16))


def hash_(index: torch.Tensor, key: torch.Tensor | int) -> torch.Tensor:
    """The random bits of each element (overwriting `index`, int32: the element's index in its
    parameter) from its parameter's key for this step."""
    return mix_(index.bitwise_xor_(key))


def round_into_(dst: torch.Tensor, value: torch.Tensor, bits: torch.Tensor) -> None:
    """Write fp32 `value` (overwritten) into bf16 `dst`, rounded up with probability
    (the low 16 bits of its pattern) / 2^16 by `bits` (int32 in [0, 2^16)).

    Adding the bits carries into the bf16 part with that probability; clearing the low
    bits then leaves an exact bf16 value. Sign-magnitude makes this round the magnitude,
    symmetrically for negative values."""
    pattern = value.view(torch.int32).add_(bits).bitwise_and_(HIGH16)
    dst.copy_(pattern.view(torch.float32))


def update_(
    w: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    hyper: torch.Tensor | Sequence[float],
    start: torch.Tensor | int,
    key: torch.Tensor | int,
) -> None:
    """`apply_` on one region whose first element has index `start` in its parameter, of
    int32 key `key` this step (integers, or 0-d int32 tensors when compiled)."""
    index = torch.arange(w.numel(), dtype=torch.int32, device=w.device).add_(start)
    apply_(w, g, m, v, hyper, hash_(index, key))


def apply_(
    w: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    hyper: torch.Tensor | Sequence[float],
    h: torch.Tensor,
) -> None:
    """AdamW (torch's: decoupled decay, bias-corrected moments; m as m b1 + g (1 - b1) where
    torch lerps, dividing by the bias correction's root as a product) on flat bf16 `w`,
    `m`, `v` in place from gradient `g`, rounding the three stochastically by the elements'
    bits `h` (hash_'s, overwritten).

    `hyper`: HYPER's eight values (an fp32 tensor when compiled: values, not constants). Each
    operation as adamw_native.c does it, in its order (sums commute); in place where it can,
    so that run eagerly at most four fp32 temporaries are alive at once."""
    values = hyper.unbind() if isinstance(hyper, torch.Tensor) else hyper
    decay, b1, b1c, b2, b2c, inv_root2, eps, neg_step = values
    g32 = g.float()
    m32 = torch.mul(g32, b1c).add_(m.float().mul_(b1))
    v32 = g32.mul_(g32).mul_(b2c).add_(v.float().mul_(b2))
    del g32  # v32 now
    step = v32.sqrt().mul_(inv_root2).add_(eps)
    step = torch.div(m32, step, out=step).mul_(neg_step)
    w32 = w.float().mul_(decay).add_(step)
    del step
    round_into_(w, w32, torch.bitwise_and(h, LOW16))
    del w32
    round_into_(m, m32, _shr(h, 16))
    del m32
    round_into_(v, v32, mix_(h.add_(_SECOND)).bitwise_and_(LOW16))


def triton_present() -> bool:
    """Whether torch.compile can build the kernel for CUDA tensors (Triton is importable)."""
    from torch.utils._triton import has_triton

    return bool(has_triton())


def keyed_update_(
    w: torch.Tensor,
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    hyper: torch.Tensor,
    keys: torch.Tensor,
    step_key: torch.Tensor,
) -> None:
    """`update_` with the key made inside: `keys` (int32: start, the parameter's static key)
    stays on the device from step to step, `step_key` (int32, 0-d) is the step's."""
    start, static = keys.unbind()
    update_(w, g, m, v, hyper, start, mix_(torch.bitwise_xor(static, step_key)))


@functools.cache
def compiled_update() -> UpdateFn:
    """`keyed_update_` compiled once per process: any length and start without recompiling
    (dynamic shapes; start and keys are tensor values, not specialised integers)."""
    compiled: UpdateFn = torch.compile(keyed_update_, dynamic=True, fullgraph=True)
    return compiled
