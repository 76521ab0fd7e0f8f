"""One rank's canary record, `canary/rank-<r>.json`: what jobfolder/canary/canary.py judges.

Times: each canary step's seconds and global input tokens, the rates, the median split
(data / forward+backward / optimizer) of the steps after the warm-up, the checkpoint's save
and load-back seconds, the set-up phases. Memory, by the plan's terms (veri_tui/plan/peak.py):

- `states_bytes`: parameters, gradients and optimizer states, counted
(veri_tui/trainer/runstats.py);
- `activations_bytes`: the forward/backward peak beyond the states, less the units in flight;
- `loss_bytes`, `in_flight_bytes`, `optimizer_step_bytes`: veri_tui/trainer/canarymeter.py;
- `allocated_peak_bytes`: CUDA's allocator peak; on CPU the states plus the larger of the
  forward/backward and the update's census peaks (tensor bytes, counted);
- `reserved_peak_bytes`, `alloc_retries`: CUDA's caching allocator (None on CPU);
- `device_peak_bytes`: the driver's figure on CUDA (`device_memory_bytes` of the run's
  record, veri_tui/trainer/devmem.py), else the most `mem_get_info` showed used at a phase mark;
  VmHWM on CPU;
- `overhead_bytes`: device peak less allocated peak (on CPU: the process beyond tensors);
- `capacity_bytes`: what one rank has: the GPU's memory, or the host's over its ranks.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import torch

from veri_tui.trainer.measure import vm_status
from veri_tui.trainer.peakmem import run_peaks

WARMUP = 1  # canary steps left out of the rates: the first (lazy init, states made)


def host_share_bytes() -> int | None:
    """What one CPU rank has of the host's memory: MemTotal over this node's ranks."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            total = next(int(ln.split()[1]) * 1024 for ln in fh if ln.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        return None
    return total // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))


def _max(records: list[dict[str, Any]], key: str) -> int | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return max(values) if values else None


def memory(canary: Any, rec: dict[str, Any]) -> dict[str, Any]:
    """The memory terms of this rank (see the module docstring)."""
    runs, device = canary.records, canary.rt.device
    states = sum((canary.stats.states or {}).values()) if canary.stats.states else None
    in_flight = canary.in_flight[0] if canary.cfg.zero_stage == 3 else 0
    beyond = _max(runs, "beyond_states")
    later = [r for r in runs[1:] if r.get("optimizer_step") is not None] or runs
    out: dict[str, Any] = {
        "states_bytes": states,
        "activations_bytes": None if beyond is None else max(beyond - in_flight, 0),
        "loss_bytes": _max(runs, "loss"),
        "in_flight_bytes": in_flight,
        "optimizer_step_bytes": _max(later, "optimizer_step"),
    }
    alloc: int | None  # the allocator's peak on CUDA, else states + the step's largest part
    if device.type == "cuda":
        alloc, reserved = run_peaks(device)
        stats = torch.cuda.memory_stats(device)
        # The driver's figure of the run's record (veri_tui/trainer/devmem.py: NVML, else
        # nvidia-smi; None when neither could say), else what mem_get_info showed at the phase
        # marks.
        own = rec.get("device_memory_bytes", rec.get("peak_device_bytes"))
        used = _max(runs, "device_used")
        device_peak = max(v for v in (own, used) if v is not None) if (own or used) else None
        retries = rec.get("alloc_retries", stats.get("num_alloc_retries"))
        out.update(allocated_peak_bytes=alloc, reserved_peak_bytes=reserved,
                   device_peak_bytes=device_peak, alloc_retries=retries,
                   device_source="driver" if own else "mem_get_info",
                   capacity_bytes=torch.cuda.mem_get_info(device)[1])  # fmt: skip
    else:
        step = out["optimizer_step_bytes"] or 0
        alloc = None if states is None or beyond is None else states + max(beyond, step)
        out.update(allocated_peak_bytes=alloc, reserved_peak_bytes=None,
                   device_peak_bytes=vm_status().get("VmHWM"), alloc_retries=None,
                   device_source="VmHWM",
                   capacity_bytes=host_share_bytes())  # fmt: skip
    if out["device_peak_bytes"] is not None and out["allocated_peak_bytes"] is not None:
        out["overhead_bytes"] = out["device_peak_bytes"] - out["allocated_peak_bytes"]
    return out


def rank_record(canary: Any, save_s: float, load_s: float, ok: bool, why: str | None
                ) -> dict[str, Any]:  # fmt: skip
    """This rank's `canary/rank-<r>.json`."""
    cfg, runs = canary.cfg, canary.records
    warm = WARMUP if len(runs) > WARMUP else 0
    steady = runs[warm:]
    split = {k: statistics.median(r[k] for r in steady)
             for k in ("data", "forward_backward", "optimizer", "after_update")}  # fmt: skip
    split["save"] = save_s
    stats = canary.stats.record(final=False)
    setup = {k: v for k, v in (stats.get("setup_s") or {}).items() if k != "first_step"}
    saves = (canary.total // cfg.checkpoint_steps if cfg.checkpoint_steps else 0) + 1
    return {
        "rank": canary.ctx.rank, "world_size": canary.ctx.world_size,
        "device": canary.rt.device.type, "device_name": stats.get("device_name"),
        "steps": canary.steps, "total_steps": canary.total, "warmup_steps": warm,
        "step_s": [r["step_s"] for r in runs], "tokens": [r["tokens"] for r in runs],
        "rates": [r["tokens"] / r["step_s"] if r["step_s"] > 0 else 0.0 for r in runs],
        "split_s": split, "save_s": save_s, "load_s": load_s, "setup_s": setup,
        "tokens_total": canary.tokens_total, "saves_planned": saves,
        "resume_ok": ok, "resume_error": why, "memory": memory(canary, stats),
    }  # fmt: skip
