"""The training loop of one rank: build everything, step, checkpoint, save the artifact.

A step's loss is averaged over the target tokens (sft) or pairs (dpo) of the GLOBAL batch:
each micro-batch's loss sum is divided by the global count (all-reduced first) and scaled
by the world size, because DDP and FSDP2 average gradients over ranks. So any mbs x
grad_acc x dp split of the same global batch gives the same update.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import torch
import torch.distributed as dist

from jobfolder.errors import ConfigError
from jobfolder.progress import NoProgress, Progress
from trainer import checkpoint, data, losses
from trainer.adamw import make_optimizer
from trainer.artifact import save_artifact
from trainer.canary import Canary
from trainer.config import TrainConfig
from trainer.dataprep import EVAL_CACHE, prepare_dataset
from trainer.evaluate import data_lines, eval_if_due, split_rows
from trainer.faults import FaultPlan
from trainer.forensics import start_responder
from trainer.measure import StateMeter
from trainer.model import (
    build_policy,
    build_reference,
    decoder_layers,
    load_tokenizer,
    resolve_model_dir,
)
from trainer.packing import packed_rows
from trainer.parallelize import (
    Runtime,
    autocast,
    grad_sync,
    init_runtime,
    offload_active,
    offload_threads,
    unwrap,
    wrap_policy,
    wrap_reference,
)
from trainer.peakmem import window_peak
from trainer.report import RankContext, RankLog
from trainer.runstats import RunStats
from trainer.schedule import scheduler
from trainer.stopping import Saver, StopWatch, stop_here
from trainer.tracking import Tracking, metric_line


def train(cfg: TrainConfig, ctx: RankContext, log: RankLog) -> None:
    """Run the planned job on this rank."""
    for line in cfg.plan_header:
        log.info(line)
    start_responder(cfg.job_dir, ctx.rank)  # answers the watchdog's dump requests
    progress = Progress(cfg.job_dir, ctx.rank)  # read by the supervisor's hang watchdog
    progress.mark("rendezvous")
    rt = init_runtime(cfg)
    progress.mark("load")
    torch.manual_seed(cfg.seed)
    path = resolve_model_dir(cfg.model_path)
    stats = RunStats(ctx, rt.device, cfg.zero_stage, offload_active(cfg, rt))  # run-rank-<r>
    with stats.setup.phase("data"):
        tok = load_tokenizer(path)
        rows, held = split_rows(cfg, prepare_dataset(cfg, ctx, tok, path, log))  # tokens/
        if cfg.eval_sources:
            held = prepare_dataset(cfg, ctx, tok, path, log, cfg.eval_sources, EVAL_CACHE)
        rows = packed_rows(cfg, rows, log)  # with `packing`: trainer/packing.py
    progress.mark("load")  # each part of the load restarts the watchdog's load timeout
    gbs = cfg.global_batch_size
    if len(rows) < gbs:
        what = "packed rows" if cfg.packing else "rows"
        raise ConfigError(f"global_batch_size: {gbs} is more than the dataset's {len(rows)} {what}")
    per_epoch = len(rows) // gbs
    total = cfg.max_steps or cfg.num_epochs * per_epoch
    backend = "nccl" if rt.device.type == "cuda" else "gloo"
    for line in data_lines(cfg, len(rows), len(held), per_epoch, total):
        log.info(line)
    log.info(f"device: {rt.device.type} x{rt.world_size} ({backend})")
    if cfg.cpu_offload and not offload_active(cfg, rt):
        log.info(
            "cpu_offload: CPUOffloadPolicy needs an accelerator; on CPU the states already "
            "live in host memory, so this run goes without it"
        )
    threads = offload_threads(cfg, rt)
    if threads is not None:
        torch.set_num_threads(threads)
        log.info(f"cpu_offload: the host-side optimizer step runs on {threads} threads per rank")
    with stats.setup.phase("model"):
        policy = build_policy(cfg, path, rt.device)
    progress.mark("load")
    with stats.setup.phase("shard"):
        model = wrap_policy(policy, cfg, rt)
    progress.mark("load")
    ref = None
    if cfg.method == "dpo" and not cfg.lora_rank:
        with stats.setup.phase("model"):
            reference = build_reference(path)
        with stats.setup.phase("shard"):
            ref = wrap_reference(reference, cfg, rt)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, cfg.learning_rate, cfg.weight_decay, cfg.seed, cfg.adam_beta2)
    sched = scheduler(opt, cfg.warmup_steps, total, cfg.lr_scheduler)
    start = _resume(cfg, model, opt, sched, log) if cfg.resume or cfg.resume_from else 0
    meter = StateMeter(ctx, step=min(2, total), device=rt.device)
    if ref is not None and meter.enabled:
        decoder_layers(ref)[0].register_forward_hook(meter.reference_hook(ref))
    stepper = _Stepper(cfg, rt, model, ref, opt, tok.pad_token_id, rows, meter)
    stepper.stats = stats
    faults = FaultPlan(rt.rank)
    canary = Canary(cfg, rt, ctx, stats, rows, total, start)  # `--canary K`: no-op without
    stepper.progress, stepper.first_epoch = canary.progress(progress), canary.first_epoch
    stop = StopWatch(cfg.job_dir, rt.device)  # a Slurm job's stop requests (no-op elsewhere)
    saver = Saver(cfg, model, opt, sched, progress, faults, log)
    tracking = Tracking(cfg, log, rt.rank)  # closed by RankLog.close, whatever the end
    for step in range(start, total):
        if stop.requested():  # every rank agrees, so all stop after the same step
            stop_here(cfg, rt.rank, step, start, stop, saver, log)
            return
        progress.mark("data", step + 1)
        faults.at_step(step + 1)
        t0 = time.perf_counter()
        canary.begin(step, model, opt)
        loss, grad_norm, tokens, rewards = stepper.step(step)
        canary.end(step, tokens, opt)
        stats.step_done(tokens, time.perf_counter() - t0)
        if step == start:
            log.info(stats.setup.line())  # this attempt's set-up, once its first step is done
        lr = sched.get_last_lr()[0]
        sched.step()
        evaluated = eval_if_due(cfg, rt, step + 1, total, model, held, tok.pad_token_id,
                                stepper.reference, progress)  # fmt: skip
        if (step + 1) % cfg.logging_steps == 0 or step + 1 == total or evaluated is not None:
            metric = metric_line(step + 1, total, per_epoch, loss, float(lr), grad_norm, evaluated)
            metric["tokens_per_s"] = round(tokens / (time.perf_counter() - t0), 1)
            metric.update(window_peak(rt.device))  # a collective: every rank logs here
            tracking.write({**metric, **rewards})
        if canary.due(step + 1):  # saves step K itself, loads it back, waits for the gate
            if not canary.gate(step + 1, saver, model, opt, log):
                stats.write(final=False)
                return
        elif cfg.checkpoint_steps and (step + 1) % cfg.checkpoint_steps == 0:
            saver.save(step + 1)
    stats.write()  # the peak of training, before the artifact's gather
    progress.mark("artifact")
    save_artifact(
        model, tok, cfg.output_dir, lora=bool(cfg.lora_rank), precision=cfg.precision,
        shard_bytes=cfg.artifact_shard_bytes,
    )  # fmt: skip
    log.info(f"artifact: {cfg.output_dir}")
    progress.mark("done")


def _resume(cfg: TrainConfig, model: Any, opt: Any, sched: Any, log: RankLog) -> int:
    """Load the checkpoint the supervisor chose for this attempt (`resume_from`), else the
    newest complete one (`resume: true`), if any; return the step to continue from."""
    root = cfg.resume_from.parent if cfg.resume_from else cfg.ckpt_dir
    if cfg.resume_from:  # chosen and verified by the supervisor: load exactly that step
        found: int | None = int(cfg.resume_from.name.removeprefix("step-"))
    else:
        found = checkpoint.latest(cfg.ckpt_dir)
    if found is None:
        log.info("resume: no complete checkpoint, starting from step 0")
        return 0
    state = checkpoint.load(root, found, model, opt, lora=bool(cfg.lora_rank))
    sched.load_state_dict(state["scheduler"])
    log.rewind(int(state["step"]))
    log.info(f"resume: from checkpoint step-{found}")
    return int(state["data_position"])


class _Stepper:
    """One optimizer step: forward/backward over this rank's micro-batches, clip, update."""

    stats: RunStats | None = None  # the run's always-on measurements (trainer/runstats.py)
    progress: Progress = NoProgress()  # train() sets the rank's (jobfolder/progress.py)
    first_epoch: list[int] | None = None  # a canary's order of epoch 0 (trainer/canary.py)

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


def _reference_fn(model: torch.nn.Module, ref: torch.nn.Module | None, device: torch.device) -> Any:
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
