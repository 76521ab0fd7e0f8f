"""The learning-rate schedule: linear warmup, then the knob `lr_scheduler`'s decay.

As a factor of the peak `learning_rate`, by optimizer step (from 0): warmup rises linearly
to 1 over `warmup_steps` ((step + 1) / warmup), then over the steps left until `total`,
progress p in [0, 1]: cosine 0.5 (1 + cos(pi p)) and linear 1 - p (both reach 0 at the
last step, as Hugging Face's schedulers), constant 1.
"""

from __future__ import annotations

import math

import torch


def lr_factor(step: int, warmup: int, total: int, name: str = "cosine") -> float:
    """The factor on the peak learning rate at optimizer step `step` (from 0)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if name == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if name == "linear":
        return 1.0 - progress
    if name == "constant":
        return 1.0
    raise ValueError(f"lr_scheduler: {name!r} is not one of cosine, linear, constant")


def scheduler(
    opt: torch.optim.Optimizer, warmup: int, total: int, name: str
) -> torch.optim.lr_scheduler.LambdaLR:
    """The optimizer's LambdaLR over `lr_factor` (its state is checkpointed with the rest)."""
    lr_factor(0, warmup, total, name)  # an unknown name fails here, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total, name))
