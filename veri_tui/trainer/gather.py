"""The final weights to rank 0, group by group over the job's process group.

The artifact (veri_tui/trainer/artifact.py) writes the trained tensors from rank 0 without
gathering the model: consecutive tensors are taken a group at a time, where a group is what
one FSDP2 unit holds (a decoder layer's tensors together; the embedding, and the final norm
with an untied head, apart), so rank 0 holds at most the largest group beyond its shards,
and the other ranks nothing. Each group is one `dist.gather` on the job's own process group
(the one FSDP2 shards over; with cpu_offload its gloo side, the shards being on the host):
every rank sends its rows of the group's tensors in one flat buffer, padded to FSDP2's chunk
of rows (torch.chunk: rank r holds rows [r*c, (r+1)*c)), and rank 0 cuts each tensor's rows
out of the ranks' buffers. Before, it received each tensor from each rank point to point,
which on NCCL opens a communicator per pair of ranks the first time, then transfers one at a
time (300-1,000 of them at 8 GPUs).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _unit(name: str, t: torch.Tensor) -> tuple[str, torch.device, torch.dtype]:
    """The group a tensor goes in: its decoder layer (else `root`), device and dtype."""
    found = _LAYER.search(name)
    return (found.group(1) if found else "root"), _local(t).device, t.dtype


def groups(tensors: Sequence[tuple[str, torch.Tensor]]) -> list[list[tuple[str, torch.Tensor]]]:
    """Consecutive runs of `tensors` in one unit, device and dtype (the gather's groups)."""
    out: list[list[tuple[str, torch.Tensor]]] = []
    last = None
    for name, t in tensors:
        key = _unit(name, t)
        if out and key == last:
            out[-1].append((name, t))
        else:
            out.append([(name, t)])
        last = key
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _sharded(t: torch.Tensor) -> bool:
    return (
        isinstance(t, DTensor) and t.dim() > 0 and any(isinstance(p, Shard) for p in t.placements)
    )


Span = tuple[tuple[int, ...], int, int, int]  # shape, rows per rank, per row, buffer offset


def gathered(
    tensors: Sequence[tuple[str, torch.Tensor]], rank: int
) -> Iterator[tuple[str, torch.Tensor | None]]:
    """Each (name, whole tensor on rank 0, None elsewhere), in order; a collective: every
    rank iterates it to the end. Tensors that are not sharded are rank 0's own. Rank 0 holds
    a group's gathered rows and the one whole tensor it yields (the caller drops it), and for
    a moment the previous group's rows, until the collective library's thread lets go of
    them (seen on gloo)."""
    for group in groups(tensors):
        sharded = [(n, t) for n, t in group if _sharded(t)]
        parts, spans = _gather_group(sharded, rank) if sharded else (None, {})
        for name, t in group:
            if name in spans:
                yield name, None if parts is None else _whole(parts, spans[name])
            else:
                yield name, _local(t).detach() if rank == 0 else None
        del parts


def _gather_group(
    group: list[tuple[str, torch.Tensor]], rank: int
) -> tuple[list[torch.Tensor] | None, dict[str, Span]]:
    """One gather of the group's rows to rank 0: every rank's flat buffer there (None
    elsewhere), and where each tensor's rows sit in a buffer."""
    world = dist.get_world_size()
    spans: dict[str, Span] = {}
    size = 0
    for name, t in group:
        rows, per_row = t.shape[0], math.prod(t.shape[1:])
        step = -(-rows // world)
        spans[name] = (tuple(t.shape), step, per_row, size)
        size += step * per_row
    first = _local(group[0][1])
    buffer = torch.zeros(size, dtype=first.dtype, device=first.device)
    for name, t in group:
        local = _local(t).detach().reshape(-1)
        at = spans[name][3]
        buffer[at : at + local.numel()].copy_(local)
    # Rank 0's own rows stay where they are: its buffer is its slot of the gather.
    parts = [buffer, *(torch.empty_like(buffer) for _ in range(world - 1))] if rank == 0 else None
    dist.gather(buffer, parts, dst=0)
    return parts, spans


def _whole(parts: list[torch.Tensor], span: Span) -> torch.Tensor:
    """A tensor's rows from each rank's buffer (rank r's: rows [r*step, (r+1)*step))."""
    shape, step, per_row, at = span
    pieces = []
    for r, part in enumerate(parts):
        held = max(0, min(shape[0], (r + 1) * step) - r * step)
        pieces.append(part[at : at + held * per_row])
    return torch.cat(pieces).view(shape)
