"""Packing: which samples share one row of max_seq_length (the `packing` knob).

Best-fit decreasing over the samples' token counts: longest first (ties by row number),
each into the open row whose free space is the smallest that still holds it, else a new
row. The rows it makes depend only on the lengths, not on the dataset's order, so the
planner (veri_tui/plan/cost.py) counts the trainer's packed rows exactly from the token
histogram it already has, and the trainer (veri_tui/trainer/packing.py) makes the same rows from
the token cache's lengths. Stdlib only: both sides import it.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Row numbers grouped into packed rows of at most `capacity` tokens each (a sample
    longer than `capacity` sits alone: the encoder already truncates at max_seq_length)."""
    if capacity < 1:
        raise ValueError(f"capacity must be positive, got {capacity}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    packs: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (free tokens, pack number), sorted: best fit first
    for i in order:
        need = min(lengths[i], capacity)
        k = bisect_left(free, (need, -1))
        if k < len(free):
            space, p = free.pop(k)
        else:
            space, p = capacity, len(packs)
            packs.append([])
        packs[p].append(i)
        if space - need > 0:
            insort(free, (space - need, p))
    return packs


def packed_lengths(hist: Iterable[tuple[int, int]], capacity: int) -> list[int]:
    """The token count of every packed row, from a histogram of (sample tokens, samples)
    (the planner's token count): the same rows `pack` makes from the lengths themselves."""
    lengths = [min(n, capacity) for n, rows in sorted(hist) for _ in range(rows)]
    return [sum(lengths[i] for i in p) for p in pack(lengths, capacity)]
