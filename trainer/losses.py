"""Losses as sums, so the loop can divide by the GLOBAL batch's target count.

SFT: the sum of next-token cross-entropies over target tokens. DPO: the sum over pairs of
-log sigmoid(beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))),
with sequence log-probabilities summed over completion tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer.data import IGNORE, Example, collate


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def count_targets(examples: list[Example]) -> int:
    """Target tokens after the one-token shift (the first position predicts nothing)."""
    return sum(sum(lab != IGNORE for lab in e.labels[1:]) for e in examples)


def sft_loss_sum(
    model: nn.Module, examples: list[Example], pad_id: int, device: torch.device
) -> torch.Tensor:
    """Summed cross-entropy of one micro-batch."""
    b = _to(collate(examples, pad_id), device)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        b["labels"][:, 1:].flatten(),
        ignore_index=IGNORE,
        reduction="sum",
    )


def sequence_logps(model: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-row sum of log-probabilities of the target tokens."""
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    labels = b["labels"][:, 1:]
    mask = labels != IGNORE
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = torch.gather(logp, 2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum(-1)


def dpo_loss_sum(
    model: nn.Module,
    pairs: list[tuple[Example, Example]],
    pad_id: int,
    device: torch.device,
    beta: float,
    reference: Callable[[dict[str, torch.Tensor]], torch.Tensor],
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Summed DPO loss of one micro-batch (chosen and rejected in one forward)."""
    rows = [c for c, _ in pairs] + [r for _, r in pairs]
    b = _to(collate(rows, pad_id), device)
    with torch.no_grad():
        ref = reference(b)
    pol = sequence_logps(model, b)
    n = len(pairs)
    margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
    loss = -F.logsigmoid(beta * margin).sum()
    return loss, {"reward_accuracy": float((margin > 0).float().sum())}
