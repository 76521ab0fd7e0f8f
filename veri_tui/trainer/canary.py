"""The canary (`veri-tui launch JOB --canary K`): the job's first K steps, measured, then a
wait at the gate; go continues the same process from step K, no-go ends it.

- Worst case first: the first epoch's order puts the K x global_batch_size longest rows
  first, longest first (data.longest_first), so step 1 carries the longest samples at the
  planned micro batch; every row is still trained on once per epoch.
- Each canary step is timed by phase and measured by term (veri_tui/trainer/canarymeter.py); the
  first is the warm-up (lazy initialisation, optimizer states made), left out of the rates.
  The optimizer's time ends when its step does (a step post-hook): clipping and the update,
  what the plan's optimizer term counts; the loss's all-reduce after it is `after_update`.
- After step K: one checkpoint saved (the job's own `step-K`), then loaded back in place
  over zeroed trainable parameters and optimizer states, which must come back exactly
  (float64 sums of every local shard).
- Each rank writes `canary/rank-<r>.json` and marks `gate`; the node's supervisor judges
  (veri_tui/jobfolder/canary/canary.py) and writes `canary/decision.json`. The ranks agree (any
  no-go stops all: every node's supervisor judges its own ranks), local rank 0 writes
  `canary/outcome.json`, and the loop goes on or returns.

An attempt that starts at or after step K (a resume) runs no canary; it keeps the canary's
order of the first epoch (the spec's `canary` still says K), so its data matches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from veri_tui.jobfolder.canary.canary import outcome_file, rank_file, read_decision
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.errors import TrainerError
from veri_tui.trainer import checkpoint, data
from veri_tui.trainer.adamw_overlap import settle
from veri_tui.trainer.canarymeter import (
    CensusPoints,
    CudaPoints,
    PhaseClock,
    split_times,
    step_memory,
    watch_units,
)
from veri_tui.trainer.canaryrecord import rank_record
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.model import decoder_layers
from veri_tui.trainer.parallelize import Runtime, unwrap
from veri_tui.trainer.report import RankContext, RankLog
from veri_tui.trainer.runstats import RunStats


def row_length(row: Any) -> int:
    """A row's input tokens: a sequence's, or a DPO pair's both."""
    if isinstance(row, tuple):
        return sum(len(e.input_ids) for e in row)
    return len(row.input_ids)


class Canary:
    """One attempt's canary; inert (`steps` 0) without `--canary` or from a later step."""

    def __init__(self, cfg: TrainConfig, rt: Runtime, ctx: RankContext, stats: RunStats,
                 rows: Any, total: int, start: int) -> None:  # fmt: skip
        self.cfg, self.rt, self.ctx, self.stats = cfg, rt, ctx, stats
        self.steps = min(cfg.canary_steps, total) if start < cfg.canary_steps else 0
        self.total, self.in_flight = total, [0]
        self.records: list[dict[str, Any]] = []
        self.first_epoch: list[int] | None = None
        self.tokens_total = 0.0
        if cfg.canary_steps:
            lengths = [row_length(rows[i]) for i in range(len(rows))]
            order = data.epoch_order(len(rows), cfg.seed, 0)
            gbs = cfg.global_batch_size
            self.first_epoch = data.longest_first(order, lengths, cfg.canary_steps * gbs)
            self.tokens_total = total * gbs * sum(lengths) / max(1, len(lengths))
        self.clock: PhaseClock | None = None

    def progress(self, inner: Any) -> Any:
        """The stepper's progress writer: the phase clock while a canary runs."""
        if not self.steps:
            return inner
        self.clock = PhaseClock(inner, self.rt.device)
        return self.clock

    def begin(self, step: int, model: Any, opt: Any) -> None:
        """Before canary step ``step`` (0-based): start its clock and memory points."""
        if self.clock is None or step >= self.steps:
            return
        cuda = self.rt.device.type == "cuda"
        self.clock.points = CudaPoints(self.rt.device) if cuda else (
            CensusPoints() if step == 0 else None)  # fmt: skip
        self.clock.params = [p for p in model.parameters() if p.requires_grad]
        self.clock.marks, self.clock.active = [], True
        self.hooks = []
        if self.clock.points is not None:
            # transformers' method (unannotated there), through nn.Module's __getattr__.
            embeddings = cast(Callable[[], nn.Module | None], unwrap(model).get_output_embeddings)
            out = embeddings()
            if out is not None:
                self.hooks.append(
                    out.register_forward_pre_hook(lambda *_: self.clock.note("output_layer"))
                )
            if self.cfg.zero_stage == 3:
                self.hooks += watch_units(model, decoder_layers(model), self.in_flight)
        if opt is not None:  # the update's end: the optimizer time is clipping plus update
            clock = self.clock

            # An update overlapped with the next forward (cpu_offload) is waited for here:
            # the canary times the whole of it, as the plan counts it.
            def updated(*_: Any) -> None:
                settle(opt)
                clock.note("updated")

            self.hooks.append(opt.register_step_post_hook(updated))
        self.states_before = self._opt_tensors(opt)
        self.clock.note("start")

    def end(self, step: int, tokens: float, opt: Any) -> None:
        """After canary step ``step``: its times and memory terms."""
        clock = self.clock
        if clock is None or step >= self.steps:
            return
        clock.note("end")
        for hook in self.hooks:
            hook.remove()
        seconds = clock.marks[-1][1] - clock.marks[0][1]
        rec: dict[str, Any] = {"step_s": seconds, "tokens": tokens, **split_times(clock.marks)}
        points = clock.points
        if isinstance(points, CensusPoints):
            points.close()
        if points is not None:
            made = [t for k, t in self._opt_tensors(opt).items() if k not in self.states_before]
            states = sum(self.stats.states.values()) if self.stats.states else 0
            rec.update(step_memory(clock.marks, points, states, clock.grads, made))
            if isinstance(points, CudaPoints):
                rec["device_used"] = points.used
        clock.points, clock.active = None, False
        self.records.append(rec)

    @staticmethod
    def _opt_tensors(opt: Any) -> Any:
        if opt is None:
            return {}
        return {id(v): v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)}

    def due(self, step: int) -> bool:
        """True after the canary's last step (1-based ``step``): time for the gate."""
        return bool(self.steps) and step == self.steps

    def gate(self, step: int, saver: Any, model: Any, opt: Any, log: RankLog) -> bool:
        """Save step ``step``, load it back, write this rank's record, wait for the gate's
        answer (every rank agrees); True to go on."""
        t0 = time.perf_counter()
        saver.save(step)
        save_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ok, why = load_back(self.cfg, step, model, opt)
        load_s = time.perf_counter() - t0
        rec = rank_record(self, save_s, load_s, ok, why)
        rank_file(self.ctx.job_dir, self.ctx.rank).parent.mkdir(exist_ok=True)
        write_json_atomic(rank_file(self.ctx.job_dir, self.ctx.rank), rec)
        log.info(f"canary: {step} steps measured; checkpoint step-{step} saved in {save_s:.2f} s"
                 f" and loaded back in {load_s:.2f} s; waiting at the gate")  # fmt: skip
        saver.progress.mark("gate")
        answer = self._wait()
        flag = torch.tensor([int(bool(answer["go"]))], dtype=torch.int32, device=self.rt.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        go = bool(flag.item())
        line = answer["line"] if go == bool(answer["go"]) else "canary: no-go on another node"
        if self.ctx.local_rank == 0:
            write_json_atomic(outcome_file(self.ctx.job_dir), {"go": go, "line": line})
        if go:
            log.info(f"canary: go: the job continues from step {step}")
        else:
            log.info(f"canary: stopped after step {step} (checkpoint step-{step}), no artifact")
        return go

    def _wait(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.cfg.canary_gate_s
        while time.monotonic() < deadline:
            answer = read_decision(self.ctx.job_dir)
            if answer is not None:
                return answer
            time.sleep(0.2)
        return {"go": False, "line": f"canary: no-go: no decision within "
                f"{self.cfg.canary_gate_s:g} s (the supervisor did not judge)"}  # fmt: skip


def _locals(model: Any, opt: Any) -> list[torch.Tensor]:
    """The local data of every trainable parameter and optimizer state (a shard's own)."""
    tensors = [p for p in model.parameters() if p.requires_grad]
    tensors += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def _sums(tensors: list[torch.Tensor]) -> list[float]:
    return [float(t.detach().sum(dtype=torch.float64)) for t in tensors]


def load_back(cfg: TrainConfig, step: int, model: Any, opt: Any) -> tuple[bool, str | None]:
    """Zero the trainable parameters and optimizer states, load checkpoint ``step`` back in
    place and check every local shard came back as it was (a collective)."""
    folder = Path(cfg.ckpt_dir) / f"step-{step}"
    if not checkpoint.verify(folder):
        return False, f"{folder.name} does not verify against its manifest"
    before = _sums(_locals(model, opt))
    with torch.no_grad():
        for t in _locals(model, opt):
            t.detach().zero_()
    try:
        checkpoint.load(cfg.ckpt_dir, step, model, opt, lora=bool(cfg.lora_rank))
    except (RuntimeError, ValueError, KeyError, OSError, TrainerError) as exc:
        return False, f"loading {folder.name} failed: {type(exc).__name__}: {exc}"
    after = _sums(_locals(model, opt))
    if len(after) != len(before) or any(a != b for a, b in zip(after, before, strict=True)):
        wrong = sum(a != b for a, b in zip(after, before, strict=False))
        return False, f"{wrong} of {len(before)} tensors differ after loading {folder.name}"
    return True, None
