"""Packed rows: several tokenized samples in one row of max_seq_length (the `packing` knob).

Which samples share a row is veri_tui/jobfolder/data/packing.py's best-fit decreasing over their
token counts (read from the token cache's offsets, no row decoded), the same rows the planner
counts. A packed row is its samples one after another: ids and labels concatenated, positions
restarting at 0 at each sample, and each sample's first label IGNORE, so the last token of one
sample is never scored on the first of the next. The loss is then exactly the unpacked samples'
losses summed (tests/trainer/test_packing.py), and the attention never crosses a boundary
(veri_tui/trainer/data.py `collate`, veri_tui/trainer/losses.py `forward_logits`). The packed rows
are the training rows: global_batch_size counts them, each epoch shuffles them
(veri_tui/trainer/data.py `global_batch`) and the ranks split them as any rows. Eval rows stay
unpacked (eval_loss is per target token either way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from veri_tui.jobfolder.data.packing import pack
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.data import IGNORE, Example
from veri_tui.trainer.report import RankLog


def row_lengths(rows: Sequence[Any]) -> list[int]:
    """Every row's token count: the cache's offsets when `rows` has `lengths()` (a
    TokenCache, or some of its rows), else each row's ids."""
    if hasattr(rows, "lengths"):
        return list(rows.lengths())
    return [len(rows[i].input_ids) for i in range(len(rows))]


def join(examples: Sequence[Example]) -> Example:
    """One packed row from its samples (see the module's docstring)."""
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    for e in examples:
        ids += e.input_ids
        labels += [IGNORE, *e.labels[1:]]  # position 0 predicts nothing unpacked either
        positions += range(len(e.input_ids))
    return Example(ids, labels, positions)


class Packed(Sequence[Example]):
    """`rows` packed into rows of at most `capacity` tokens: `packed[i]` is one Example."""

    def __init__(self, rows: Sequence[Any], capacity: int) -> None:
        self.rows = rows
        self.packs = pack(row_lengths(rows), capacity)
        self.samples = len(rows)

    def __len__(self) -> int:
        return len(self.packs)

    def __getitem__(self, i: int) -> Example:  # type: ignore[override]
        return join([self.rows[j] for j in self.packs[i]])

    def lengths(self) -> list[int]:
        """Each packed row's tokens."""
        lengths = row_lengths(self.rows)
        return [sum(lengths[j] for j in p) for p in self.packs]


def packed_rows(cfg: TrainConfig, rows: Sequence[Any], log: RankLog) -> Sequence[Any]:
    """The training rows: `rows` packed when the job asks for packing, else as they are."""
    if not cfg.packing:
        return rows
    packed = Packed(rows, cfg.max_seq_length)
    log.info(f"packing: {len(rows)} samples in {len(packed)} rows of at most "
             f"{cfg.max_seq_length} tokens")  # fmt: skip
    return packed
