"""A rank's side of a stop request: stop after the same step as every other rank.

The supervisor of a Slurm job asks the ranks to stop (veri_tui/jobfolder/contract/stopping.py: the
time limit is coming, or the job is preempted or requeued) by writing `stop.request`; Slurm itself
sends every process of a requeued or preempted job SIGTERM. With `VERI_STOP_REQUESTS=1` (set only by
that supervisor) a rank takes either as the request: `StopWatch.requested` is called at every step
boundary and agrees across ranks with one all-reduce (MAX of each rank's 0/1), since the file and
the signal reach the ranks at slightly different times and every rank must save the same step. A
SIGTERM with `cancel.request` present is a cancel: the rank ends at once, as without this module.
Without the variable (local and SSH jobs) nothing changes: no handler, no collective.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from veri_tui.jobfolder.contract.stopping import (
    PREEMPTED,
    STOP_ENV,
    cancel_requested,
    stop_reason,
    write_stopped,
)
from veri_tui.jobfolder.supervise.progress import Progress
from veri_tui.trainer import checkpoint
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.faults import FaultPlan
from veri_tui.trainer.report import RankLog


class StopWatch:
    """Whether this job's ranks were asked to stop; `requested` is a collective."""

    def __init__(self, job_dir: Path, device: torch.device) -> None:
        self.job_dir, self.device = Path(job_dir), device
        self.enabled = os.environ.get(STOP_ENV) == "1"
        self.signalled = False
        if self.enabled:
            signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, signum: int, _frame: FrameType | None) -> None:
        if cancel_requested(self.job_dir):
            # A cancel: end as the default action would, at once.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.signalled = True  # acted on at the next step boundary

    def requested(self) -> bool:
        """True on every rank when any rank was asked to stop (call on every rank)."""
        if not self.enabled:
            return False
        local = self.signalled or stop_reason(self.job_dir) is not None
        flag = torch.tensor([int(local)], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def reason(self) -> str:
        """Why: the request's reason (the supervisor's), else a SIGTERM's: preempted."""
        return stop_reason(self.job_dir) or PREEMPTED

    def cause(self) -> str:
        """What asked, for the log: the supervisor's request, or a SIGTERM from Slurm (a
        preemption's grace signal reaches the job's steps, the ranks, not the batch shell)."""
        request = stop_reason(self.job_dir)
        if request is not None:
            return f"{request}, the supervisor's stop.request"
        return "preempted, SIGTERM from Slurm" if self.signalled else PREEMPTED


class Saver:
    """Saves the checkpoint of a step: on schedule (`checkpoint_steps`) and on a stop."""

    def __init__(self, cfg: TrainConfig, model: Any, opt: Any, sched: Any, progress: Progress,
                 faults: FaultPlan, log: RankLog) -> None:  # fmt: skip
        self.cfg, self.model, self.opt, self.sched = cfg, model, opt, sched
        self.progress, self.faults, self.log = progress, faults, log

    def save(self, step: int) -> None:
        """Save and commit `step-<step>` (a collective), after that step's update."""
        cfg = self.cfg
        extra = {"scheduler": self.sched.state_dict(), "data_position": step, "seed": cfg.seed}
        self.progress.mark("checkpoint")
        checkpoint.save(cfg.ckpt_dir, step, self.model, self.opt, extra, lora=bool(cfg.lora_rank),
                        keep=cfg.keep_checkpoints, faults=self.faults)  # fmt: skip
        self.log.info(f"checkpoint: step-{step} committed")


def stop_here(
    cfg: TrainConfig, rank: int, step: int, start: int, stop: StopWatch, saver: Saver, log: RankLog
) -> None:
    """Stop after `step` on request: save it unless this attempt ran no step or its
    schedule saved it already, then rank 0 answers (veri_tui/jobfolder/contract/stopping.py). The
    cause is logged first, before the checkpoint it leads to."""
    reason = stop.reason()
    log.info(f"stop: asked to stop ({stop.cause()}) after step {step}")
    every = cfg.checkpoint_steps
    scheduled = every is not None and every != 0 and step % every == 0
    if step > start and not scheduled:
        saver.save(step)
    # step == start > 0: the checkpoint this attempt resumed from holds the step.
    ckpt = f"step-{step}" if step > 0 else None
    if rank == 0:
        write_stopped(cfg.job_dir, step, ckpt, reason)
    saved = f"checkpoint {ckpt} committed" if ckpt else "no checkpoint (no step ran)"
    log.info(f"stop: stopped after step {step} ({reason}), {saved}")
