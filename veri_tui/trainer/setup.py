"""What a rank builds before its first step: the policy, the DPO reference, AdamW, the schedule.

One function for the loop (veri_tui/trainer/loop.py) and for the trace on fake CUDA
(veri_tui/trainer/fakecuda/trace.py), so a trace runs exactly the set-up a job runs: the
model built on meta from config.json (LoRA and checkpointing applied), wrapped in DDP or
FSDP2 as planned and only then materialized and filled from the checkpoint; for a DPO full
fine-tune the frozen reference the same way; AdamW over the trainable parameters and the
learning-rate schedule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from veri_tui.trainer.adamw import make_optimizer
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.model import build_policy, build_reference, resolve_model_dir
from veri_tui.trainer.parallelize import Runtime, wrap_policy, wrap_reference
from veri_tui.trainer.runstats import SetupClock
from veri_tui.trainer.schedule import scheduler


@dataclass
class Parts:
    """The trained model (as wrapped), the DPO reference (or None), AdamW, the schedule."""

    model: nn.Module
    ref: nn.Module | None
    opt: torch.optim.Optimizer
    sched: Any


def build_parts(
    cfg: TrainConfig,
    rt: Runtime,
    path: Path | None = None,
    total_steps: int = 1,
    clock: SetupClock | None = None,
    mark: Callable[[], None] = lambda: None,
    on_device: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Parts:
    """Build, wrap and load the models, then the optimizer and schedule. `clock` times the
    `model` and `shard` phases; `mark` is called after each part of the load (the loop's
    hang watchdog restarts its load timeout there); `path` is the model folder when the caller
    resolved it already. The models are built on meta outside `on_device` and wrapped and
    materialized inside it (a trace enters its fake device there: trace.py)."""

    def phase(name: str) -> contextlib.AbstractContextManager[None]:
        return clock.phase(name) if clock is not None else contextlib.nullcontext()

    path = path or resolve_model_dir(cfg.model_path)
    with phase("model"):
        policy = build_policy(cfg, path, rt.device)
    mark()
    with phase("shard"), on_device():
        model = wrap_policy(policy, cfg, rt)
    mark()
    ref = None
    if cfg.method == "dpo" and not cfg.lora_rank:
        with phase("model"):
            reference = build_reference(path)
        with phase("shard"), on_device():
            ref = wrap_reference(reference, cfg, rt)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(
        params, cfg.learning_rate, cfg.weight_decay, cfg.seed, cfg.adam_beta2, cfg.adam_beta1
    )
    sched = scheduler(opt, cfg.warmup_steps, total_steps, cfg.lr_scheduler)
    return Parts(model, ref, opt, sched)
