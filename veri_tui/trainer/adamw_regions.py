"""Where each of a parameter's local elements sits in the whole parameter, and its key: the
bf16 AdamW's inputs (veri_tui/trainer/adamw.py), cut into pieces for its kernels.

The random bits of an element depend on its index in the WHOLE parameter (veri_tui/trainer/
adamw_kernel.py hashes it), so a rank needs where its shard starts (`local_region`). Indices
are int32 in the kernels: a parameter of more than 2^31 elements is cut at multiples of 2^31
into pieces, each with its own key and indices from 0. `Regions` keeps each parameter's flat
views and static keys from step to step (building them costs ops and, when compiled, a
tensor on the device), rebuilt when the parameter's storage or its states change.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from veri_tui.trainer.adamw_batch import Piece, mix32, signed32

PIECE = 1 << 31  # element indices are int32: a larger parameter is hashed piece by piece


def key(*parts: int) -> int:
    """An int32 key from small integers (each mixed in by lowbias32)."""
    x = 0
    for p in parts:
        x = mix32(x ^ p)
    return signed32(x)


def local_region(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """This rank's part of `t` and the flat index, in the whole tensor, where it starts.

    FSDP2 shards dim 0 over a 1-D mesh in torch.chunk pieces (veri_tui/trainer/loading.py reads
    the checkpoint the same way); a replicated DTensor or a plain tensor is whole here.
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


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 1 else t.view(-1)


class Regions:
    """Each parameter's pieces for one optimizer (its seed), cached across steps."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        # Per parameter: the flat views the kernels take and its static keys (on its
        # device), kept while the parameter's storage and its states are the same tensors.
        self._views: dict[torch.Tensor, tuple[Any, ...]] = {}

    def pieces(
        self, p: torch.Tensor, state: dict[str, Any], index: int, device: torch.device, way: str
    ) -> list[Piece]:
        """The parameter's local elements as kernel inputs (`index`: its place in the
        optimizer, from 1): flat views, where each piece starts in its parameter (mod 2^31)
        and its static key; `way` compiled also makes the keys' tensor on `device`."""
        weight, start = local_region(p)
        assert p.grad is not None  # step() passes only the parameters that have one
        grad = local_region(p.grad)[0]
        cached = self._views.get(p)
        if cached is None or not _same(cached, weight, state):
            m, v = (local_region(state[k])[0] for k in ("exp_avg", "exp_avg_sq"))
            if not all(t.is_contiguous() for t in (weight, m, v)):
                raise ValueError("bf16 AdamW: a parameter or its state is not contiguous")
            flat = [_flat(weight), _flat(m), _flat(v)]  # views: the same memory
            pieces, lo = [], 0
            while lo < weight.numel():  # cut where the index in the parameter crosses 2^31
                first = start + lo
                hi = min(weight.numel(), (first // PIECE + 1) * PIECE - start)
                pieces.append((slice(lo, hi), first % PIECE, key(self.seed, index, first // PIECE)))
                lo = hi
            keys = [torch.tensor([s, k], dtype=torch.int32, device=device)
                    if way == "compiled" else None for _, s, k in pieces]  # fmt: skip
            cached = (weight, state["exp_avg"], state["exp_avg_sq"], flat, pieces, keys)
            self._views[p] = cached
        flat, pieces, keys = cached[3], cached[4], cached[5]
        g = grad if grad.is_contiguous() else grad.contiguous()
        if way != "native" or len(pieces) > 1:  # the C kernel needs only the address
            g = _flat(g)
        if len(pieces) == 1:  # the common case: no slicing (an op per tensor and step)
            return [Piece(flat[0], g, flat[1], flat[2], pieces[0][1], pieces[0][2], keys[0])]
        return [Piece(flat[0][s], g[s], flat[1][s], flat[2][s], at, key, kt)
                for (s, at, key), kt in zip(pieces, keys, strict=True)]  # fmt: skip


def _same(cached: tuple[Any, ...], weight: torch.Tensor, state: dict[str, Any]) -> bool:
    """Whether cached views still alias the parameter and its states (a checkpoint load
    replaces the states, and the parameter's storage may be swapped)."""
    w, m, v = cached[0], cached[1], cached[2]
    if m is not state["exp_avg"] or v is not state["exp_avg_sq"]:
        return False
    if w is weight:  # a DTensor's to_local() under no_grad, a plain parameter itself
        return True
    try:
        return bool(w.data_ptr() == weight.data_ptr() and w.shape == weight.shape)
    except RuntimeError:  # a fake tensor (a trace) has no address
        return False
