"""eval_loss: the loss over the eval rows, without gradients, every eval_steps and at the end.

The eval rows are the job's eval_dataset (its own token cache, `<job_dir>/eval-tokens/`), else a
seeded eval_fraction of the training mixture held out of training
(veri_tui/jobfolder/data/dataload.py `eval_split`: the planner holds out the same count). eval_loss
is what the training loss is, over all eval rows at once: SFT, the summed next-token cross-entropy
over every target token divided by their count; DPO, the mean loss per pair. Each rank takes
micro-batches of micro_batch_size rows, rank r the r-th of every dp; the sums are all-reduced. Every
rank runs the same number of forwards (FSDP2 gathers each layer collectively): a rank with no rows
left in the last round runs one row with weight 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from veri_tui.jobfolder.data.dataload import eval_split
from veri_tui.trainer import losses
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.parallelize import autocast


class Rows(Sequence[Any]):
    """Some rows of a token cache, by index (the training rows, or the held-out ones)."""

    def __init__(self, rows: Sequence[Any], indices: list[int]) -> None:
        self.rows, self.indices = rows, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        return self.rows[self.indices[i]]

    def lengths(self) -> list[int]:
        """Each row's tokens, from the cache's offsets (veri_tui/trainer/packing.py reads them)."""
        every = self.rows.lengths()  # type: ignore[attr-defined]
        return [every[i] for i in self.indices]


def split_rows(cfg: TrainConfig, rows: Sequence[Any]) -> tuple[Sequence[Any], Sequence[Any]]:
    """(training rows, held-out rows) by eval_fraction; all rows and none without it."""
    held = eval_split(len(rows), cfg.eval_fraction, cfg.seed) if not cfg.eval_sources else []
    if not held:
        return rows, []
    out = set(held)
    return Rows(rows, [i for i in range(len(rows)) if i not in out]), Rows(rows, held)


def due(cfg: TrainConfig, step: int, total: int, has_rows: bool) -> bool:
    """Whether eval_loss is taken after optimizer step `step` (1-based)."""
    if not has_rows:
        return False
    return step == total or bool(cfg.eval_steps and step % cfg.eval_steps == 0)


def data_lines(cfg: TrainConfig, rows: int, held: int, per_epoch: int, total: int) -> list[str]:
    """The log's lines about the data: its sources and steps, and the eval rows if any."""
    names = ", ".join(s.label + (f" x{s.weight:g}" if s.weight != 1 else "") for s in cfg.sources)
    out = [f"data: {names} ({rows} rows, {per_epoch} steps/epoch, {total} steps)"]
    if held:
        every = f"every {cfg.eval_steps} steps and " if cfg.eval_steps else ""
        out.append(f"eval: {held} rows, eval_loss {every}at the end")
    return out


def eval_if_due(cfg: TrainConfig, rt: Any, step: int, total: int, model: torch.nn.Module,
                held: Sequence[Any], pad_id: int, reference: Any, progress: Any
                ) -> float | None:  # fmt: skip
    """eval_loss after optimizer step `step` (1-based) when it is due (`due`), else None;
    the watchdog sees the eval phase (`progress`)."""
    if not due(cfg, step, total, bool(held)):
        return None
    progress.mark("eval", step)
    return eval_loss(model, held, cfg, rt.device, pad_id, reference,
                     lambda: autocast(cfg, rt), lambda: progress.mark("eval"))  # fmt: skip


def eval_loss(
    model: torch.nn.Module,
    rows: Sequence[Any],
    cfg: TrainConfig,
    device: torch.device,
    pad_id: int,
    reference: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None,
    autocast: Callable[[], Any],
    mark: Callable[[], None] = lambda: None,
) -> float:
    """The eval loss over `rows` (every rank calls it: collectives); `mark` is called before
    each round (the hang watchdog's progress)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mbs, n = cfg.micro_batch_size, len(rows)
    rounds = -(-n // (mbs * world))
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, targets or pairs
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for r in range(rounds):
                mark()
                start = (r * world + rank) * mbs
                mb = [rows[i] for i in range(start, min(start + mbs, n))]
                weight = 1.0 if mb else 0.0
                mb = mb or [rows[0]]  # the same forwards on every rank
                with autocast():
                    if cfg.method == "dpo":
                        assert reference is not None  # a DPO job always passes its reference
                        loss, _ = losses.dpo_loss_sum(model, mb, pad_id, device, cfg.beta,
                                                      reference)  # fmt: skip
                        count = float(len(mb))
                    else:
                        loss = losses.sft_loss_sum(model, mb, pad_id, device)
                        count = float(losses.count_targets(mb))
                sums += weight * torch.stack(
                    [loss.detach().double().reshape(()), torch.tensor(count, dtype=torch.float64,
                                                                      device=device)]
                )  # fmt: skip
    finally:
        model.train(was_training)
    dist.all_reduce(sums)
    total, count = sums.tolist()
    return float(total / max(count, 1.0))
