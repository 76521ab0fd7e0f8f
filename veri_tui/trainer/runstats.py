"""What every run measures on each rank, always on: measured/run-rank-<r>.json.

Cheap enough for every job (a sum over the parameter list once, a float per step):

- state bytes after the first optimizer step of this attempt, counted tensor by tensor from
  the local shards ON THIS RANK'S DEVICE (veri_tui/trainer/measure.py `on_device`; what lives on the
  host, cpu_offload's shards, gradients and AdamW moments or AdamW's `step` scalars on CUDA,
  goes into `host_states` instead, and `offloaded` says whether CPUOffloadPolicy ran):
  parameters, gradients (taken after `optimizer.step()`, before they are
  zeroed) and optimizer states; at zero_stage 2 the unsharded compute copy, taken after the
  first step's last forward; for a DPO full fine-tune the reference model's resident
  parameters (whole at stage 0, its shard at stage 2/3: its layers in flight are transient,
  as in the plan). `states_bytes` sums them, as the plan's `states_bytes_per_gpu` does.
- peak memory (veri_tui/trainer/devmem.py): on CUDA allocated (`max_memory_allocated`,
`peak_bytes`),
  reserved, the allocator's retries, the device memory the driver reports (NVML, else
  nvidia-smi, sampled after steps; None with its reason when neither answers) and the host's
  VmHWM; on CPU the process's VmHWM (resident peak; file-backed pages count too) and no
  device figure (recorded as not measured).
- steady-state tokens/s: the median of the per-step rates (global input tokens over the
  step's time on this rank) after the first `WARMUP_STEPS` steps of this attempt (all steps
  when the run is shorter).
- set-up seconds (`setup_s`, `SetupClock`): loading the model(s), sharding them (DDP/FSDP2),
  reading and tokenizing the data, and the attempt's first optimizer step; rank 0 logs them
  as one `setup: model 3.1 s, shard 0.4 s, data 2.0 s, first step 1.2 s` line.

The file is written after the first step (states and the peak so far), every `REWRITE_EVERY_S`
seconds of training after it (what readers show for a running job), and again when training ends,
before the artifact is saved (the peak of training, not of the final gather). The supervisor gathers
the ranks' files into job.json's `measured` (veri_tui/jobfolder/supervise/jobstats.py).
VERI_MEASURE_STATES=1 (veri_tui/trainer/measure.py) still writes the detailed
measured/rank-<r>.json.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.trainer.devmem import DeviceMemory, peak_memory
from veri_tui.trainer.measure import split_bytes
from veri_tui.trainer.report import RankContext

REWRITE_EVERY_S = 30.0  # a small JSON file per rank: cheap beside a step

#: Steps of each attempt left out of the steady-state rate (start-up, first allocations).
WARMUP_STEPS = 2


def run_stats_path(job_dir: Path, rank: int) -> Path:
    """measured/run-rank-<r>.json of a job folder."""
    return JobLayout(job_dir).rank_measured(rank)


def steady_rate(rates: list[float], warmup: int = WARMUP_STEPS) -> tuple[float | None, int]:
    """(median of ``rates`` after ``warmup`` steps, steps it used); the warm-up is dropped
    only when steps remain after it."""
    timed = rates[warmup:] or rates
    return (statistics.median(timed) if timed else None), len(timed)


class SetupClock:
    """Seconds spent in each set-up phase of a rank (time.perf_counter), summed per phase:
    the policy and the DPO reference each add to `model` and `shard`."""

    PHASES = ("model", "shard", "data", "first_step")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as part of phase ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        """Count ``seconds`` more for phase ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def line(self) -> str:
        """`setup: model 3.1 s, shard 0.4 s, data 2.0 s, first step 1.2 s` (phases seen)."""
        parts = [
            f"{name.replace('_', ' ')} {self.seconds[name]:.1f} s"
            for name in self.PHASES
            if name in self.seconds
        ]
        return "setup: " + ", ".join(parts)


class RunStats:
    """Collects one rank's run measurements and writes them (see the module docstring)."""

    def __init__(
        self, ctx: RankContext, device: torch.device, zero_stage: int, offload: bool = False
    ) -> None:
        self.ctx, self.device, self.zero_stage, self.offload = ctx, device, zero_stage, offload
        self.states: dict[str, int] | None = None
        self.host_states: dict[str, int] = {}
        self.device_memory = DeviceMemory(device)  # NVML samples after steps (devmem.py)
        self.compute_copy: int | None = None
        self.rates: list[float] = []
        self.step_s: list[float] = []
        self.setup = SetupClock()  # the loop times its phases into it
        self.written_at = time.monotonic()

    def after_forward(self, model: nn.Module) -> None:
        """First step, stage 2: the compute copy is the set of parameters unsharded now."""
        if self.compute_copy is None and self.states is None and self.zero_stage == 2:
            unsharded = [p for p in model.parameters() if not isinstance(p, DTensor)]
            self.compute_copy = split_bytes(unsharded, self.device)[0]

    def after_update(
        self, model: nn.Module, opt: torch.optim.Optimizer, ref: nn.Module | None
    ) -> None:
        """First step only: parameters, gradients, optimizer states (and the reference)."""
        if self.states is not None:
            return
        params = list(model.parameters())
        states = [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
        parts: dict[str, list[Any]] = {
            "params": params, "grads": [p.grad for p in params], "optimizer": states,
        }  # fmt: skip
        if ref is not None:
            parts["reference"] = list(ref.parameters())
        got: dict[str, int] = {}
        for key, tensors in parts.items():
            got[key], away = split_bytes(tensors, self.device)
            if away:
                self.host_states[key] = away
        if self.compute_copy:
            got["compute_copy"] = self.compute_copy
        self.states = got

    def step_done(self, tokens: float, seconds: float) -> None:
        """One optimizer step took ``seconds`` for ``tokens`` global input tokens."""
        self.step_s.append(seconds)
        self.device_memory.sample()
        self.rates.append(tokens / seconds if seconds > 0 else 0.0)
        if len(self.rates) == 1:
            self.setup.add("first_step", seconds)
            self.write(final=False)
        elif time.monotonic() - self.written_at >= REWRITE_EVERY_S:
            self.write(final=False)  # readers show a running job's figures so far

    def record(self, final: bool) -> dict[str, Any]:
        """This rank's measurements as written to measured/run-rank-<r>.json."""
        rate, used = steady_rate(self.rates)
        step_s, _ = steady_rate(self.step_s)
        out: dict[str, Any] = {
            "rank": self.ctx.rank,
            "world_size": self.ctx.world_size,
            "device": self.device.type,
            "final": final,
            "steps": len(self.rates),
            "states": dict(self.states or {}),
            "states_bytes": sum((self.states or {}).values()) if self.states else None,
            "host_states": dict(self.host_states),
            "host_states_bytes": sum(self.host_states.values()) if self.states else None,
            "offloaded": self.offload,
            **peak_memory(self.device, self.device_memory),
            "tokens_per_s": rate,
            "step_time_s": step_s,
            "steps_timed": used,
            "warmup_steps": min(WARMUP_STEPS, len(self.rates) - used),
            "setup_s": {k: round(v, 3) for k, v in self.setup.seconds.items()},
        }
        if self.device.type == "cuda":
            out["device_name"] = torch.cuda.get_device_name(self.device)
        return out

    def write(self, final: bool = True) -> dict[str, Any]:
        """Write this rank's file atomically; returns what was written."""
        data = self.record(final)
        self.written_at = time.monotonic()
        path = run_stats_path(self.ctx.job_dir, self.ctx.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, data)
        return data
