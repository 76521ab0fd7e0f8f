"""The training loop of one rank: build everything, step, checkpoint, save the artifact.

One step (its micro-batches, the loss scaled to the global batch, the update) is
veri_tui/trainer/step.py's Stepper; this module runs it from the resumed step to the last, with the
evaluation, logging, checkpoints, the canary and the stop requests around it.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.supervise.progress import Progress
from veri_tui.trainer import checkpoint
from veri_tui.trainer.adamw import StochasticAdamW
from veri_tui.trainer.adamw_overlap import overlap_forward, settle
from veri_tui.trainer.artifact import save_artifact
from veri_tui.trainer.canary import Canary
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.dataprep import EVAL_CACHE, prepare_dataset
from veri_tui.trainer.evaluate import data_lines, eval_if_due, split_rows
from veri_tui.trainer.faults import FaultPlan
from veri_tui.trainer.forensics import start_responder
from veri_tui.trainer.measure import StateMeter
from veri_tui.trainer.model import decoder_layers, load_tokenizer, resolve_model_dir
from veri_tui.trainer.packing import packed_rows
from veri_tui.trainer.parallelize import init_runtime, offload_active, offload_threads
from veri_tui.trainer.peakmem import window_peak
from veri_tui.trainer.report import RankContext, RankLog
from veri_tui.trainer.runstats import RunStats
from veri_tui.trainer.setup import build_parts
from veri_tui.trainer.step import Stepper
from veri_tui.trainer.stopping import Saver, StopWatch, stop_here
from veri_tui.trainer.tracking import Tracking, metric_line


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
        rows = packed_rows(cfg, rows, log)  # with `packing`: veri_tui/trainer/packing.py
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
    parts = build_parts(cfg, rt, path, total, stats.setup, lambda: progress.mark("load"))
    model, ref, opt, sched = parts.model, parts.ref, parts.opt, parts.sched
    if isinstance(opt, StochasticAdamW):
        log.info(opt.describe())  # after offload_threads: the host kernel's thread count
        if offload_active(cfg, rt) and opt.way == "native":
            overlap_forward(model, decoder_layers(model), opt)
            log.info("cpu_offload: each unit's host update runs beside the next forward")
    start = _resume(cfg, model, opt, sched, log) if cfg.resume or cfg.resume_from else 0
    meter = StateMeter(ctx, step=min(2, total), device=rt.device)
    if ref is not None and meter.enabled:
        decoder_layers(ref)[0].register_forward_hook(meter.reference_hook(ref))
    stepper = Stepper(cfg, rt, model, ref, opt, tok.pad_token_id, rows, meter)
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
        # The step alone is timed: NVML's sample (an init, a query and a shutdown, in
        # step_done), the stats file, the scheduler and the evaluation come after it.
        seconds = time.perf_counter() - t0
        stats.step_done(tokens, seconds)
        if step == start:
            log.info(stats.setup.line())  # this attempt's set-up, once its first step is done
        lr = sched.get_last_lr()[0]
        sched.step()
        evaluated = eval_if_due(cfg, rt, step + 1, total, model, held, tok.pad_token_id,
                                stepper.reference, progress)  # fmt: skip
        if (step + 1) % cfg.logging_steps == 0 or step + 1 == total or evaluated is not None:
            metric = metric_line(step + 1, total, per_epoch, loss, float(lr), grad_norm, evaluated)
            metric["tokens_per_s"] = round(tokens / seconds, 1) if seconds > 0 else 0.0
            metric.update(window_peak(rt.device))  # a collective: every rank logs here
            tracking.write({**metric, **rewards})
        if canary.due(step + 1):  # saves step K itself, loads it back, waits for the gate
            if not canary.gate(step + 1, saver, model, opt, log):
                stats.write(final=False)
                return
        elif cfg.checkpoint_steps and (step + 1) % cfg.checkpoint_steps == 0:
            saver.save(step + 1)
    settle(opt)  # the last update, overlapped with nothing
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
