"""The trainer's own step on a fake rank: load, steps, eval, a checkpoint's save, traced.

`trace(cfg, world)` runs, as rank 0 of `world` on fake CUDA devices (session.py), the same
functions a torchrun rank runs in veri_tui/trainer/loop.py, in the same order:
`init_runtime`, the model and its DPO reference built on meta from the checkpoint's
config.json and loaded as planned (`build_models`: LoRA, checkpointing, DDP or FSDP2,
`materialize` reading the safetensors headers; header-only files suffice: a fake tensor has
nowhere for bytes to land), the optimizer and schedule, two optimizer steps of the
`Stepper` (the second is the one whose forward has the optimizer states allocated; with
gradient accumulation the second micro-batch is the one with the gradients too, so at most
two micro-batches run per step), `eval_loss` over one micro-batch per rank when the job
evaluates, and a checkpoint's save as far as DCP plans it (checkpoint.py's state dicts,
DCP's planner, every item's bytes counted by a writer that writes nothing), then its resume
(`set_state_dict`).

The rows are synthetic and full length (max_seq_length tokens, DPO's chosen and rejected
of max_length each, no padding): the worst case, the one the plan counts. What it returns
is the tracker's summary (tracker.py) with the run's facts beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from veri_tui.trainer import checkpoint
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.data import Example
from veri_tui.trainer.evaluate import eval_loss
from veri_tui.trainer.fakecuda import placement
from veri_tui.trainer.fakecuda.runtime import Mode
from veri_tui.trainer.fakecuda.session import DEFAULT_GPU_NAME, fake_rank
from veri_tui.trainer.fakecuda.tracker import Tracker
from veri_tui.trainer.fakecuda.writer import plan_save
from veri_tui.trainer.measure import StateMeter
from veri_tui.trainer.model import decoder_layers
from veri_tui.trainer.parallelize import Runtime, autocast, init_runtime, offload_active
from veri_tui.trainer.report import RankContext
from veri_tui.trainer.setup import Parts, build_parts
from veri_tui.trainer.step import Stepper

STEPS = 2  # the second step's forward is the first with optimizer states allocated


def rows(cfg: TrainConfig, count: int, vocab: int) -> list[Any]:
    """`count` full-length synthetic rows (pairs for DPO): every token trained on."""
    length = cfg.max_length if cfg.method == "dpo" else cfg.max_seq_length
    ids = [i % max(vocab, 1) for i in range(1, length + 1)]

    half = length // 2
    positions = [*range(half), *range(length - half)] if cfg.packing else None

    def example() -> Example:  # a packed row: two samples, positions restarting halfway
        return Example(list(ids), list(ids), None if positions is None else list(positions))

    if cfg.method == "dpo":
        return [(example(), example()) for _ in range(count)]
    return [example() for _ in range(count)]


def traced_config(cfg: TrainConfig) -> TrainConfig:
    """The job's config with at most two micro-batches per step (the second's peak is every
    later one's: the gradients exist, nothing else grows), checkpoints and logs off."""
    steps = min(2, cfg.gradient_accumulation_steps)
    out = dataclasses.replace(cfg, gradient_accumulation_steps=steps)
    out.checkpoint_steps = None
    return out


def _vocab(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    return int(getattr(config, "vocab_size", 0) or 0)


class Trace:
    """What one traced run did, besides the tracker's figures."""

    def __init__(self, cfg: TrainConfig, world: int, rank: int, detail: bool = False) -> None:
        self.cfg, self.world, self.rank = cfg, world, rank
        self.tracker = Tracker(detail)
        self.attention: dict[str, int] = {}
        self.parts: Parts | None = None
        self.rt: Runtime | None = None
        self.saved_bytes = 0
        self.seconds = 0.0
        self.seen: dict[str, dict[str, str]] = {}  # placement.observe at the first step

    def problems(self) -> list[str]:
        """State found off the device the plan puts it on (placement.py)."""
        offload = self.rt is not None and offload_active(self.cfg, self.rt)
        return placement.problems(self.seen, offload)

    def summary(self) -> dict[str, Any]:
        """The tracker's summary with the run's facts (`trace` of `veri-tui plan --json`)."""
        out = self.tracker.summary()
        out.update(
            seconds=round(self.seconds, 1), ranks=self.world, rank=self.rank, device="cuda",
            attention_kernels=dict(self.attention), checkpoint_bytes=self.saved_bytes,
            placement=self.problems(),
        )  # fmt: skip
        return out


def trace(
    cfg: TrainConfig,
    world: int,
    *,
    rank: int = 0,
    gpus: int | None = None,
    gpu_name: str = DEFAULT_GPU_NAME,
    evaluate: bool | None = None,
    save: bool = True,
    inspect: Callable[[Trace], None] | None = None,
    detail: bool = False,
) -> Trace:
    """Trace the job `cfg` as rank `rank` of `world` (module docstring). `evaluate`: run
    eval_loss (default: when the job evaluates); `inspect` is called inside the fake rank
    once the steps are done (tests look at devices there); `detail`: keep every storage
    alive at the peak (Tracker.peak_detail; slow, for finding what a plan misses)."""
    t0 = time.perf_counter()
    run = Trace(traced_config(cfg), world, rank, detail)
    if evaluate is None:
        evaluate = bool(cfg.eval_fraction or cfg.eval_sources)
    with fake_rank(world, rank, gpus, gpu_name, run.attention):
        try:
            _run(run, evaluate, save, inspect)
        except Exception as exc:  # where it stopped: the phase, the last op that ran
            exc.add_note(f"fake CUDA trace: in the {run.tracker.phase} phase, "
                         f"after {run.tracker.last_op}")  # fmt: skip
            raise
    run.seconds = time.perf_counter() - t0
    return run


def _run(run: Trace, evaluate: bool, save: bool, inspect: Callable[[Trace], None] | None) -> None:
    cfg, world, tracker, mode = run.cfg, run.world, run.tracker, Mode()
    run.rt = rt = init_runtime(cfg)  # the device mesh: outside the fake mode (real ranks)

    @contextlib.contextmanager
    def on_device() -> Iterator[None]:
        with mode, tracker:
            yield

    run.parts = parts = build_parts(cfg, rt, on_device=on_device)
    tracker.layers = len(decoder_layers(parts.model))
    _ddp_reduce_in_place(parts.model, world)
    with mode, tracker:
        pad = 0
        data = rows(cfg, cfg.global_batch_size * STEPS, _vocab(parts.model))
        meter = StateMeter(RankContext.from_env(cfg.job_dir), step=0, device=rt.device)
        meter.enabled = False  # its files are a real run's
        stepper = Stepper(cfg, rt, parts.model, parts.ref, parts.opt, pad, data, meter)
        hooks = _optimizer_hooks(run, parts)
        tracker.in_step = True
        try:
            for step in range(STEPS):
                stepper.step(step)
                parts.sched.step()
        finally:
            tracker.in_step = False
            for h in hooks:
                h.remove()
        if evaluate:
            tracker.phase = "eval"
            held = data[: cfg.micro_batch_size * world]
            eval_loss(parts.model, held, cfg, rt.device, pad, stepper.reference,
                      lambda: autocast(cfg, rt))  # fmt: skip
        if save:
            tracker.phase = "checkpoint"
            lora = bool(cfg.lora_rank)
            msd, osd = checkpoint.state_dicts(parts.model, parts.opt, lora)
            run.saved_bytes = plan_save({"model": msd, "optim": osd})
            checkpoint.restore(parts.model, parts.opt, msd, osd, lora)
        if inspect is not None:
            inspect(run)


class _SameBuckets:
    """DDP's reducer, except that it never rebuilds its buckets in the order the first
    backward made its gradients: the rebuild agrees on the order over the ranks with a C++
    broadcast that reads tensor bytes. The same gradients are bucketed either way (as views
    into the buckets), so the memory is the same."""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


class _NoLogger:
    """DDP's usage logger, silent: it times iterations with a CUDA timer the CPU wheel
    does not register (`reducer_->timer_` INTERNAL ASSERT)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _ddp_reduce_in_place(model: torch.nn.Module, world: int) -> None:
    """DDP's bucket all-reduce, as its default hook leaves it: the bucket averaged in place;
    and its logger silenced (_NoLogger).

    The fake group's all-reduce completes with no value, which DDP's default hook returns as
    the bucket's result (an internal assert); this hook averages the bucket itself, the
    memory its default does (none beyond the bucket). The reducer keeps its first buckets
    (_SameBuckets)."""
    from torch.distributed import GradBucket  # type: ignore[attr-defined]
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        return

    def hook(state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(bucket.buffer().div_(world))
        return done

    # DDP checks the annotations themselves, which `from __future__ import annotations`
    # leaves as strings here.
    hook.__annotations__ = {"bucket": GradBucket, "return": torch.futures.Future[torch.Tensor]}
    model.register_comm_hook(None, hook)
    model.logger = _NoLogger()
    model.reducer = _SameBuckets(model.reducer)  # type: ignore[assignment]


def _optimizer_hooks(run: Trace, parts: Parts) -> list[Any]:
    """Mark the optimizer step for the tracker; gradients and states re-tagged at its ends;
    where every kind of state lives, observed at the first step's end (placement.py)."""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    params = [p for p in parts.model.parameters() if p.requires_grad]
    tracker = run.tracker

    def pre(*_: Any) -> None:
        tracker.retag((p.grad for p in params), "gradients")
        tracker.in_optimizer = True

    def post(opt: torch.optim.Optimizer, *_: Any) -> None:
        tracker.in_optimizer = False
        states = (v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
        tracker.retag(states, "optimizer")
        if not run.seen:  # gradients and states all exist until zero_grad
            run.seen = placement.observe(parts.model, opt, parts.ref)

    return [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
