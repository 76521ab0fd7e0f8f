"""Datasets: tokenized rows and global batches.

Rows become token ids by veri_tui/jobfolder/data/encode.py's rules (re-exported here: `Example`,
`encode_row`, ...), the ones the launch preflight checks every row by. Every row is checked
before training: the first bad one raises DataError naming the file and line. Batches are cut
from a seeded permutation per epoch, so every rank knows every global batch and reads only
its part.
The trainer tokenizes once into the job folder's token cache (veri_tui/trainer/dataprep.py,
veri_tui/trainer/tokencache.py) and reads its rows from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# The encoding rules live with the job folder (stdlib), so the launch preflight runs them too.
from veri_tui.jobfolder.data.encode import (
    IGNORE,
    Example,
    NothingToTrain,
    encode_dpo,
    encode_row,
    encode_sft,
)
from veri_tui.jobfolder.data.rows import read_rows

__all__ = [
    "IGNORE", "Example", "NothingToTrain", "collate", "encode_dpo", "encode_row", "encode_sft",
    "epoch_order", "global_batch", "load_dataset", "longest_first", "rank_slice",
]  # fmt: skip


def load_dataset(path: Path, method: str, tok: Any, max_len: int) -> list[Any]:
    """Check and tokenize the whole file in memory: Examples (sft_text) or (chosen, rejected)
    pairs. The trainer itself goes through the token cache (veri_tui/trainer/dataprep.py) instead;
    this is the reference its tests and the planner's token count are checked against."""
    rows = read_rows(path)
    return [encode_row(tok, row, f"{path} line {no}", method, max_len) for no, row in rows]


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The row order of one epoch: a permutation fixed by seed and epoch."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


def longest_first(order: list[int], lengths: list[int], count: int) -> list[int]:
    """``order`` with its ``count`` longest rows moved to the front, longest first (ties in
    their order), the rest as they were: the canary's first steps carry the worst case."""
    longest = sorted(range(len(order)), key=lambda k: -lengths[order[k]])[:count]
    chosen = set(longest)
    return [order[k] for k in longest] + [r for k, r in enumerate(order) if k not in chosen]


def global_batch(n: int, gbs: int, seed: int, step: int) -> list[int]:
    """Row indices of optimizer step `step` (0-based); the last partial batch is dropped."""
    per_epoch = n // gbs
    epoch, k = divmod(step, per_epoch)
    return epoch_order(n, seed, epoch)[k * gbs : (k + 1) * gbs]


def rank_slice(batch: list[int], micro: int, rank: int, dp: int, mbs: int) -> list[int]:
    """This rank's rows of micro-step `micro`: any mbs x ga x dp split covers `batch` once."""
    start = (micro * dp + rank) * mbs
    return batch[start : start + mbs]


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence; padding carries no loss and no attention.

    Packed rows get `position_ids` instead of an attention mask: positions restart at 0 at
    every sample (and at the padding, a segment of its own), and transformers' masking
    (masking_utils `find_packed_sequence_indices`) makes the causal mask block-diagonal
    from them when no 2D mask is given, for sdpa, eager, flex and flash attention alike."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    packed = any(e.positions is not None for e in examples)
    positions = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        labels[i, :n] = torch.tensor(e.labels)
        mask[i, :n] = 1
        positions[i, :n] = torch.tensor(e.positions if e.positions is not None else range(n))
        positions[i, n:] = torch.arange(width - n)
    if packed:
        return {"input_ids": ids, "labels": labels, "position_ids": positions}
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
