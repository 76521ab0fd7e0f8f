"""Gather the ranks' run measurements into job.json's `measured` (the supervisor does, at the end;
readers gather them the same way from every node while a job runs or when it ended without).

Each rank writes measured/run-rank-<r>.json (veri_tui/trainer/runstats.py): its state bytes after
the first optimizer step, its peak memory and its steady-state tokens/s. The job's figures are:

- `peak_bytes` (allocated on CUDA, VmHWM on CPU), and on CUDA `peak_reserved_bytes`,
  `alloc_retries`, `cuda_ooms`; `device_memory_bytes` (NVML or nvidia-smi, None with its
  reason in `device_memory_source` where neither answered, always on CPU) and
  `host_rss_peak_bytes`: each the largest over the ranks, since the fullest GPU is the one
  that runs out; `peak_per_rank` every rank's figures;
- `tokens_per_s`, `step_time_s`, `setup_s` (seconds loading the model, sharding it, reading
  the data and the first step): rank 0's (every rank times the same global step; rank 0 is
  the one the log reports);
- `states_bytes`: the largest over the ranks, `states_bytes_per_rank` each rank's: tensors on
  the rank's device only; `host_states_bytes` the largest of what lived on the host instead
  (cpu_offload's shards, gradients and moments), `offloaded` whether any rank offloaded;
- `gpu`: the planned GPU type on CUDA, "cpu" when the ranks ran on CPU (a CPU run is
  calibrated apart and never changes a GPU plan); `device_name` what CUDA called it;
  `alloc_conf` and `expandable_segments`: the caching allocator's settings as it reports
  them (veri_tui/trainer/devmem.py), rank 0's.

Stdlib only: imported by veri_tui/jobfolder/supervise.py, uploaded to GPU hosts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import MEASURED

_RANK_FILE = re.compile(r"run-rank-(\d+)\.json$")
#: Each rank's memory figures, kept per rank in `peak_per_rank` (veri_tui/trainer/devmem.py).
PEAK_KEYS = ("peak_bytes", "peak_reserved_bytes", "alloc_retries", "device_memory_bytes",
             "host_rss_peak_bytes")  # fmt: skip


def rank_of(name: str) -> int | None:
    """The rank a measured/ file name is for (`run-rank-<r>.json`); None for another file."""
    m = _RANK_FILE.match(name)
    return int(m.group(1)) if m else None


def parse_rank_stats(rank: int, raw: bytes) -> dict[str, Any] | None:
    """One rank's file as read (here, or over SSH by the launch side); None when torn."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    data["rank"] = rank
    return data


def read_rank_stats(job_dir: Path) -> list[dict[str, Any]]:
    """Every readable measured/run-rank-<r>.json, by rank; a torn or foreign file is skipped."""
    out: list[dict[str, Any]] = []
    folder = Path(job_dir) / MEASURED
    if not folder.is_dir():
        return out
    for path in folder.iterdir():
        rank = rank_of(path.name)
        try:
            data = parse_rank_stats(rank, path.read_bytes()) if rank is not None else None
        except OSError:
            continue
        if data is not None:
            out.append(data)
    return sorted(out, key=lambda d: d["rank"])


def _max(values: list[Any]) -> int | float | None:
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(nums) if nums else None


def gather(job_dir: Path, spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """job.json's `measured` from the ranks' files; None when no rank wrote one (a job that
    ended before its first optimizer step)."""
    return gather_ranks(read_rank_stats(job_dir), spec)


def gather_ranks(ranks: list[dict[str, Any]], spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """`measured` from the ranks' files as read (sorted by rank; from one folder or from
    every node's); None when there are none."""
    if not ranks:
        return None
    first = ranks[0]
    device = str(first.get("device") or "cpu")
    out: dict[str, Any] = {
        "device": device,
        "gpu": str(spec.get("gpu") or "?") if device == "cuda" else "cpu",
        "ranks": len(ranks),
        "final": all(bool(r.get("final")) for r in ranks),
        "steps": first.get("steps"),
        "states_bytes": _max([r.get("states_bytes") for r in ranks]),
        "states_bytes_per_rank": [r.get("states_bytes") for r in ranks],
        "host_states_bytes": _max([r.get("host_states_bytes") for r in ranks]),
        "offloaded": any(bool(r.get("offloaded")) for r in ranks),
        "peak_bytes": _max([r.get("peak_bytes") for r in ranks]),
        "peak_source": first.get("peak_source"),
        "tokens_per_s": first.get("tokens_per_s") if first["rank"] == 0 else None,
        "step_time_s": first.get("step_time_s") if first["rank"] == 0 else None,
        "setup_s": first.get("setup_s") if first["rank"] == 0 else None,
        "steps_timed": first.get("steps_timed"),
        "warmup_steps": first.get("warmup_steps"),
    }
    out["host_rss_peak_bytes"] = _max([r.get("host_rss_peak_bytes") for r in ranks])
    out["device_memory_bytes"] = _max([r.get("device_memory_bytes") for r in ranks])
    out["device_memory_source"] = first.get("device_memory_source")
    if device == "cuda":
        for key in ("peak_reserved_bytes", "alloc_retries", "cuda_ooms"):
            out[key] = _max([r.get(key) for r in ranks])
        out["device_name"] = first.get("device_name")
        out["alloc_conf"] = first.get("alloc_conf")  # as the allocator parsed it (devmem.py)
        out["expandable_segments"] = first.get("expandable_segments")
    out["peak_per_rank"] = [
        {k: r.get(k) for k in PEAK_KEYS if r.get(k) is not None} | {"rank": r["rank"]}
        for r in ranks
    ]
    return out


def record_measured(job_path: Path) -> dict[str, Any] | None:
    """Write `measured` into job.json (under its lock) from the ranks' files; returns it.
    Never raises: a job's outcome must be recorded even when its measurements cannot be."""
    from veri_tui.jobfolder.contract.atomic import modify_job  # here: only the supervisor needs it
    from veri_tui.jobfolder.contract.record import JobRecord

    job_dir = Path(job_path).parent
    box: list[dict[str, Any] | None] = [None]

    def put(record: JobRecord) -> None:
        box[0] = gather(job_dir, record.get("spec") or {})
        record["measured"] = box[0]

    try:
        modify_job(job_path, put)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return box[0]
