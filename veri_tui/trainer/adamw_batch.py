"""The bf16 AdamW's eager way: the parameters' local elements joined into batches of at most
CHUNK elements, each updated by veri_tui/trainer/adamw_kernel.py's `update_` as one flat tensor.

Used where no compiler builds the fused kernel (a GPU without Triton, a host without a C++
compiler) and for models under adamw.COMPILE_MIN_PARAMETERS. A batch joins consecutive
parameters (and splits one larger than CHUNK), so the ops per step grow with the elements,
not with the parameter count, and the temporaries are bounded: STEP_TEMP_BYTES per element
of one batch (veri_tui/plan/peak.py counts it: SR_STEP_TEMP_BYTES, SR_CHUNK).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from veri_tui.trainer.adamw_kernel import apply_, hash_, update_

CHUNK = 1 << 22  # elements per batch
# Bytes alive at once per element of a batch (the census's count, tests/trainer/test_adamw.py):
# the joined bf16 w, g, m, v (8), the int32 bits (4) and apply_'s four fp32 temporaries (16).
STEP_TEMP_BYTES = 28
_MASK = 0xFFFFFFFF
_M1, _M2 = 0x7FEB352D, 0x846CA68B


class Piece(NamedTuple):
    """Flat views of one parameter's local elements (or a part of them), where they start
    in the parameter, its static key, and the kernel's keys tensor (compiled way only)."""

    w: torch.Tensor
    g: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor
    start: int
    key: int
    keys: torch.Tensor | None

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """w, g, m, v."""
        return self.w, self.g, self.m, self.v


def mix32(x: int) -> int:
    """lowbias32 on an unsigned 32-bit integer: adamw_kernel.mix_ in Python."""
    x &= _MASK
    x ^= x >> 16
    x = (x * _M1) & _MASK
    x ^= x >> 15
    x = (x * _M2) & _MASK
    return x ^ (x >> 16)


def signed32(x: int) -> int:
    """The int32 whose bits are the unsigned `x`."""
    x &= _MASK
    return x - (1 << 32) if x >= 1 << 31 else x


def run_batched(pieces: list[Piece], hyper: list[float], step_key: int) -> None:
    """Update every piece in place, CHUNK elements at a time (read at call time, so a test
    may make it small)."""
    batch: list[Piece] = []
    size = 0
    for piece in pieces:
        key = signed32(mix32(piece.key ^ step_key))  # keyed_update_'s key, made here
        n, at = piece.w.numel(), 0
        while at < n:
            take = min(n - at, CHUNK - size)
            w, g, m, v = (t if take == n else t[at : at + take] for t in piece.tensors())
            batch.append(Piece(w, g, m, v, piece.start + at, key, None))
            size, at = size + take, at + take
            if size == CHUNK:
                _flush(batch, hyper)
                batch, size = [], 0
    if batch:
        _flush(batch, hyper)


def _flush(batch: list[Piece], hyper: list[float]) -> None:
    if len(batch) == 1:
        p = batch[0]
        update_(p.w, p.g, p.m, p.v, hyper, p.start, p.key)
        return
    lengths = [p.w.numel() for p in batch]
    w, g, m, v = (torch.cat([p.tensors()[i] for p in batch]) for i in range(4))
    apply_(w, g, m, v, hyper, _bits(batch, lengths))
    for i, joined in ((0, w), (2, m), (3, v)):  # back into the parameters and states
        parts = list(torch.split(joined, lengths))
        torch._foreach_copy_([p.tensors()[i] for p in batch], parts)


def _bits(batch: list[Piece], lengths: list[int]) -> torch.Tensor:
    """hash_ of each element of the batch: its index in its parameter (the batch's arange
    plus its piece's start less the piece's offset in the batch) and its piece's key."""
    rows, offset = [], 0
    for p, n in zip(batch, lengths, strict=True):
        rows.append([p.start - offset, p.key])
        offset += n
    device = batch[0].w.device
    table = torch.tensor(rows, dtype=torch.int32, device=device)
    repeats = torch.tensor(lengths, device=device)
    start, key = table.repeat_interleave(repeats, dim=0, output_size=offset).unbind(1)
    index = torch.arange(offset, dtype=torch.int32, device=device).add_(start)
    del start
    return hash_(index, key)
