"""A job's `predicted` (written at launch from its plan) against its `measured` (gathered by the
supervisor from the ranks, veri_tui/jobfolder/supervise/jobstats.py): the figures, side by side
with their ratios.

`predicted` holds what the plan said for the fullest GPU: states, activations (the model's
and, when calibrated, the plan's), the peak (states + activations + the stage-3 layers in
flight), tokens/s and step time (the model's figure kept apart from a calibrated one, so
calibration never compounds). `veri-tui jobs JOB` and the app's monitor print
`comparison_lines`.

The supervisor writes `measured` when its attempt ends, from its own folder's rank files.
A reader (`so_far`) gathers it from the rank files of every node instead while it is
missing (a running job, a Slurm job requeued and pending, an attempt refused a restart) and
when it covers fewer ranks than the job has (a multi-node job's supervisors each see only
their node's ranks). A read never writes: job.json keeps what its supervisor wrote.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import MEASURED
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.jobfolder.supervise.jobstats import gather_ranks, parse_rank_stats, rank_of

if TYPE_CHECKING:
    from veri_tui.launch.machine import Machine
    from veri_tui.launch.target import Node

RANK_FILE_LIMIT = 2**20


def ranks_on(machine: Machine, job_dir: str) -> list[dict[str, Any]]:
    """Every readable rank file in one node's folder (measured/run-rank-<r>.json)."""
    folder = posixpath.join(job_dir, MEASURED)
    try:
        names = machine.listdir(folder)
    except (OSError, VeriError):
        return []  # no rank has finished a step there yet (or the node is gone)
    out = []
    for name in names:
        rank = rank_of(name)
        if rank is None:
            continue
        try:
            raw = machine.read_bytes(posixpath.join(folder, name), RANK_FILE_LIMIT)
            data = parse_rank_stats(rank, raw)
        except (OSError, VeriError):
            continue
        if data is not None:
            out.append(data)
    return out


def so_far(record: Mapping[str, Any], nodes: Sequence[Node]) -> dict[str, Any] | None:
    """The job's `measured` from every node's rank files, when the record's own is missing
    or covers fewer ranks than the job has; None to keep the record's."""
    spec = record.get("spec") or {}
    have = record.get("measured") or {}
    world = int(spec.get("gpu_count") or 1)
    # A record without "ranks" was written by a release before per-rank gathering: its
    # figures are the finished run's and are read as that release printed them.
    if have and ("ranks" not in have or int(have["ranks"] or 0) >= world):
        return None
    by_rank: dict[int, dict[str, Any]] = {}
    for node in nodes:
        for data in ranks_on(node.host.machine, node.job_dir):
            by_rank[data["rank"]] = data
    if len(by_rank) <= int(have.get("ranks") or 0):
        return None
    return gather_ranks([by_rank[r] for r in sorted(by_rank)], spec)


def predicted_of(plan: dict[str, Any]) -> dict[str, Any]:
    """job.json's `predicted` from a plan record's dict (`PlanRecord.to_dict()`)."""
    act = plan.get("activations") or {}
    tp = plan.get("throughput") or {}
    states = plan.get("states_bytes_per_gpu")
    known_act = bool(act.get("known"))
    activations = act.get("bytes_per_gpu") if known_act else None
    transient = (act.get("transient_gather_bytes") or 0) if known_act else None
    peak = states + activations + transient if states is not None and known_act else None
    known_tp = bool(tp.get("known"))
    parts = (act.get("peak") or {}) if known_act else {}
    cost = plan.get("cost") or {}
    return {
        "gpu": (plan.get("gpu") or {}).get("name"),
        "states_bytes": states,
        "activations_bytes": activations,
        "activations_model_bytes": (act.get("calibration") or {}).get("model_bytes", activations),
        "transient_gather_bytes": transient,
        "peak_bytes": peak,
        # The planner's own peak (veri_tui/plan/peak.py): allocated bytes with the optimizer
        # step's temporary, and with the 2 GiB overhead: what the device figure is set beside.
        "allocated_bytes": parts.get("allocated_bytes"),
        "device_peak_bytes": parts.get("peak_bytes"),
        "tokens_per_s": tp.get("tokens_per_s") if known_tp else None,
        "tokens_per_s_model": (tp.get("calibration") or {}).get(
            "model_tokens_per_s", tp.get("tokens_per_s") if known_tp else None
        ),
        "step_time_s": tp.get("step_time_s") if known_tp else None,
        # The optimizer step (veri_tui/plan/optimizer_time.py): the plan's (calibrated), the
        # model's before calibration, and the same step on the host with one thread (what a
        # CPU run's rank does): what a canary's measured optimizer time is set beside.
        "optimizer_s": tp.get("optimizer_s") if known_tp else None,
        "optimizer_s_model": (tp.get("calibration") or {}).get(
            "model_optimizer_s", tp.get("optimizer_s") if known_tp else None
        ),
        "optimizer_host_s": (tp.get("optimizer") or {}).get("host_one_thread_s"),
        # The whole job (the plan's cost): GPU-hours and price, None when not estimated.
        **{k: cost.get(k) for k in ("gpu_hours", "price", "price_per_gpu_hour")},
        # The peak's parts (veri_tui/plan/peak.py): what a canary measures beside them.
        "peak_parts": _peak_parts(act),
        "calibrated": {
            k: v["calibration"] for k, v in (("throughput", tp), ("activations", act))
            if v.get("calibration")
        },
    }  # fmt: skip


def _peak_parts(act: dict[str, Any]) -> dict[str, Any] | None:
    """The plan's peak by part, its allocated and device peaks, the optimizer step's
    temporary and the loss's bytes; None for a plan without them."""
    peak = act.get("peak") if act.get("known") else None
    if not peak:
        return None
    parts = dict(peak["parts"])
    if not (parts.get("activations") or parts.get("logits") or parts.get("in_flight")):
        # The optimizer step is the peak (peak.py zeroes the backward's parts there, as they
        # are freed by then); a canary still measures the backward's, so it is set beside
        # the plan's backward: its activations with logits, and its units in flight.
        parts.update(activations=act.get("bytes_per_gpu") or 0, logits=0,
                     in_flight=act.get("in_flight_bytes") or 0)  # fmt: skip
    return {
        **parts,
        "allocated_bytes": peak.get("allocated_bytes"),
        "peak_bytes": peak.get("peak_bytes"),
        "optimizer_step_bytes": peak.get("optimizer_step_bytes"),
        "logits_and_loss_bytes": act.get("logits_and_loss_bytes"),
    }


def _bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _rate(n: float) -> str:
    return f"{n:,.0f} tok/s"


def _secs(n: float) -> str:
    return f"{n:.3f} s"


#: (label, predicted key, measured key, format)
ROWS = (
    ("states/GPU", "states_bytes", "states_bytes", _bytes),
    ("peak memory/GPU", "peak_bytes", "peak_bytes", _bytes),
    ("tokens/s", "tokens_per_s", "tokens_per_s", _rate),
    ("step time", "step_time_s", "step_time_s", _secs),
)


def _num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


#: Shown only when the run measured them (CUDA): the allocator's and the driver's figures,
#: each beside the planner's allocated bytes (optimizer step included) or its peak with the
#: overhead (veri_tui/trainer/devmem.py says where each comes from).
CUDA_ROWS = (
    ("allocated/GPU (with step)", "allocated_bytes", "peak_bytes", _bytes),
    ("reserved/GPU", "allocated_bytes", "peak_reserved_bytes", _bytes),
    ("device memory/GPU", "device_peak_bytes", "device_memory_bytes", _bytes),
    ("allocator retries", "-", "alloc_retries", lambda n: f"{n:.0f}"),
)


def comparison(record: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, predicted, measured, measured/predicted) rows; "-" where a side is missing."""
    pred = record.get("predicted") or {}
    meas = record.get("measured") or {}
    rows: list[tuple[str, str, str, str]] = []
    cuda = meas.get("device") == "cuda" and meas.get("alloc_retries") is not None  # devmem.py
    extra = [r for r in CUDA_ROWS if cuda and meas.get(r[2]) is not None]
    for label, pkey, mkey, fmt in (*ROWS, *extra):
        p, m = _num(pred.get(pkey)), _num(meas.get(mkey))
        ratio = f"{m / p:.3g}x" if p and m is not None else "-"
        shown = [fmt(v) if v is not None else "-" for v in (p, m)]
        rows.append((label, shown[0], shown[1], ratio))
    return rows


def _how_far(record: Mapping[str, Any]) -> str:
    """ "" for an ended run's figures (as earlier releases printed them), else how many steps
    a running job's figures cover so far."""
    meas = record.get("measured") or {}
    if meas.get("final", True) or has_ended(record.get("status")):
        return ""
    return f"so far ({meas.get('steps')} steps) "


def comparison_lines(record: Mapping[str, Any]) -> list[str]:
    """The comparison as aligned text lines, with where it was measured; [] when the job
    has neither side (launched before these were recorded)."""
    if not record.get("measured") and not record.get("predicted"):
        return []
    meas = record.get("measured") or {}
    rows = [("", "predicted", "measured", "ratio"), *comparison(record)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out = [
        "  ".join(
            [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]
        )
        for r in rows
    ]
    if meas:
        where = meas.get("device_name") or meas.get("gpu") or meas.get("device")
        peak = meas.get("peak_source") or "peak"
        planned = (record.get("predicted") or {}).get("gpu") or "?"
        out.append(
            f"measured {_how_far(record)}on {where} x{meas.get('ranks')}, planned for "
            f"{planned} ({peak}; tokens/s: median of "
            f"{meas.get('steps_timed')} steps after {meas.get('warmup_steps')} warm-up)"
        )
        if "device_memory_source" in meas and meas.get("device_memory_bytes") is None:
            out.append(f"device memory: {meas.get('device_memory_source') or 'not measured'}")
        if meas.get("offloaded") and meas.get("host_states_bytes"):
            out.append(f"on the host, not the GPU: {_bytes(meas['host_states_bytes'])} of "
                       "states (cpu_offload)")  # fmt: skip
    else:
        out.append("measured: nothing (the job ended before its first optimizer step)")
    return out
