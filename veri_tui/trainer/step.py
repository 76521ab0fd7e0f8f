"""One optimizer step of one rank: its micro-batches, the loss scaled to the global
batch, backward, clipping and the update (veri_tui/trainer/loop.py runs it step after step).

A step's loss is averaged over the target tokens (sft) or pairs (dpo) of the GLOBAL batch:
each micro-batch's loss sum is divided by the global count (all-reduced first) and scaled
by the world size, because DDP and FSDP2 average gradients over ranks. So any mbs x
grad_acc x dp split of the same global batch gives the same update. DPO's reference
log-probs come from the frozen copy, or from the policy with its adapters off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import torch
import torch.distributed as dist

from veri_tui.jobfolder.supervise.progress import NoProgress, Progress
from veri_tui.trainer import data, losses
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.measure import StateMeter
from veri_tui.trainer.parallelize import Runtime, autocast, grad_sync, unwrap
from veri_tui.trainer.runstats import RunStats

#: DPO's reference log-probabilities of a collated batch (losses.dpo_loss_sum's `reference`).
Reference = Callable[[dict[str, torch.Tensor]], torch.Tensor]


class Stepper:
    """One optimizer step: forward/backward over this rank's micro-batches, clip, update."""

    stats: RunStats | None = None  # the run's always-on measurements (veri_tui/trainer/runstats.py)
    # train() sets the rank's (veri_tui/jobfolder/supervise/progress.py)
    progress: Progress = NoProgress()
    first_epoch: list[int] | None = None  # a canary's order of epoch 0 (veri_tui/trainer/canary.py)

    def __init__(
        self,
        cfg: TrainConfig,
        rt: Runtime,
        model: torch.nn.Module,
        ref: torch.nn.Module | None,
        opt: torch.optim.Optimizer,
        pad_id: int,
        rows: Sequence[Any],
        meter: StateMeter,
    ) -> None:
        self.cfg, self.rt, self.model, self.ref, self.opt = cfg, rt, model, ref, opt
        self.pad_id, self.rows, self.meter = pad_id, rows, meter
        self.params = [p for p in model.parameters() if p.requires_grad]
        # DPO's reference log-probs; an SFT job has none (under FSDP2 building it runs a
        # warm-up forward: a wasted all-gather of every layer, found by a trace).
        self.reference: Reference | None = None
        if cfg.method == "dpo":
            self.reference = _reference_fn(model, ref, rt.device)

    def _micro_batches(self, step: int) -> list[list[Any]]:
        cfg, rt = self.cfg, self.rt
        gbs = cfg.global_batch_size
        batch = data.global_batch(len(self.rows), gbs, cfg.seed, step)
        if self.first_epoch is not None and step < len(self.rows) // gbs:
            batch = self.first_epoch[step * gbs : (step + 1) * gbs]
        slices = [
            data.rank_slice(batch, m, rt.rank, rt.world_size, cfg.micro_batch_size)
            for m in range(cfg.gradient_accumulation_steps)
        ]
        return [[self.rows[i] for i in s] for s in slices]

    def _loss(self, mb: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The micro-batch's loss sum, and the sums it adds to the step's totals."""
        cfg, dev = self.cfg, self.rt.device
        if cfg.method == "sft_text":
            loss = losses.sft_loss_sum(self.model, mb, self.pad_id, dev)
            return loss, loss.detach().double().reshape(1)
        assert self.reference is not None  # a DPO job always has one
        loss, rewards = losses.dpo_loss_sum(
            self.model, mb, self.pad_id, dev, cfg.beta, self.reference
        )
        return loss, torch.cat([loss.detach().double().reshape(1), rewards])

    def step(self, step: int) -> tuple[float, float, float, dict[str, float]]:
        """Run step `step` (0-based); returns (loss, grad_norm, global input tokens, the
        DPO reward metrics, empty for SFT)."""
        cfg, rt = self.cfg, self.rt
        micro = self._micro_batches(step)
        flat = [e for mb in micro for e in mb]
        if cfg.method == "dpo":
            flat = [e for pair in flat for e in pair]
        local = [losses.count_targets(flat), sum(len(e.input_ids) for e in flat)]
        counts = torch.tensor(local, dtype=torch.float64, device=rt.device)
        dist.all_reduce(counts)  # the global target count, before any backward
        targets, tokens = counts.tolist()
        denom = targets if cfg.method == "sft_text" else float(cfg.global_batch_size)
        measuring = self.meter.active(step + 1)
        # Summed: the loss, and for DPO the chosen reward, rejected reward, chosen > rejected.
        size = 1 if cfg.method == "sft_text" else 4
        totals = torch.zeros(size, dtype=torch.float64, device=rt.device)
        last = len(micro) - 1
        for m, mb in enumerate(micro):
            with grad_sync(self.model, m == last):
                self.progress.mark("forward")
                with autocast(cfg, rt):
                    loss, sums = self._loss(mb)
                if measuring and m == last:
                    self.meter.after_forward(self.model, cfg.zero_stage)
                if self.stats is not None and m == last:
                    self.stats.after_forward(self.model)
                # DDP and FSDP2 average over ranks: scale so the sum over ranks is the mean.
                self.progress.mark("backward")
                scaled = loss * (rt.world_size / denom)
                cast(Callable[[], None], scaled.backward)()  # unannotated in torch
            totals += sums
        if measuring:
            self.meter.after_backward(self.model, self.opt)
            self.meter.reference_rest(self.ref, cfg.zero_stage)
        self.progress.mark("optimizer")
        # max_grad_norm 0 turns clipping off; the norm is still reported.
        clip = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.params, clip)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        self.opt.step()
        if self.stats is not None:  # gradients and optimizer states all exist only here
            self.stats.after_update(self.model, self.opt, self.ref)
        self.opt.zero_grad(set_to_none=True)
        dist.all_reduce(totals)
        if measuring:
            extra = {"zero_stage": cfg.zero_stage, "precision": cfg.precision}
            self.meter.write({**extra, "lora_rank": cfg.lora_rank, "method": cfg.method})
        summed = totals.tolist()
        return summed[0] / denom, float(norm), tokens, reward_metrics(summed[1:], denom)


def reward_metrics(sums: list[float], pairs: float) -> dict[str, float]:
    """TRL's DPO metrics from the step's global sums (chosen reward, rejected reward, pairs
    with chosen > rejected), as means over its pairs; {} for SFT (no sums)."""
    if not sums:
        return {}
    chosen, rejected, correct = (x / pairs for x in sums)
    return {
        "rewards/chosen": round(chosen, 6),
        "rewards/rejected": round(rejected, 6),
        "rewards/margins": round(chosen - rejected, 6),
        "rewards/accuracies": round(correct, 6),
    }


def _reference_fn(
    model: torch.nn.Module, ref: torch.nn.Module | None, device: torch.device
) -> Reference:
    """DPO reference log-probs: the frozen copy, or the policy with adapters disabled."""
    if ref is not None:
        return lambda b: losses.sequence_logps(ref, b)
    inner = unwrap(model)  # call the PeftModel itself: no DDP bookkeeping for a no-grad pass
    if hasattr(model, "set_requires_gradient_sync"):
        # peft's disable_adapter() flips the adapters' requires_grad off. FSDP2 fixes each
        # group's gradient dtype from requires_grad at its first forward (lazy init), so
        # that first forward must see the adapters trainable: a one-token warm-up pass.
        with torch.no_grad():
            model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device))

    def with_adapters_off(b: dict[str, torch.Tensor]) -> torch.Tensor:
        # peft's context manager, through nn.Module's __getattr__ (typed Tensor | Module).
        with cast(Callable[[], AbstractContextManager[None]], inner.disable_adapter)():
            return losses.sequence_logps(inner, b)

    return with_adapters_off
