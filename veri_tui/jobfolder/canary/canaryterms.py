"""The canary's terms: each memory term the plan counts beside the largest any rank measured,
and the optimizer step's seconds beside the plan's (veri_tui/jobfolder/canary.py judges them).
Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def rank_max(ranks: list[dict[str, Any]], key: str) -> float | None:
    values = [v for r in ranks if (v := num((r.get("memory") or {}).get(key))) is not None]
    return max(values) if values else None


#: (term, planned key of `predicted.peak_parts` or of `predicted`, measured key of memory)
TERMS = (
    ("states", "states", "states_bytes"),
    ("activations", "activations", "activations_bytes"),
    ("loss", "logits_and_loss_bytes", "loss_bytes"),
    ("in_flight", "in_flight", "in_flight_bytes"),
    ("optimizer_step", "optimizer_step_bytes", "optimizer_step_bytes"),
    ("overhead", "overhead", "overhead_bytes"),
    ("allocated_peak", "allocated_bytes", "allocated_peak_bytes"),
    ("reserved_peak", None, "reserved_peak_bytes"),
    ("device_peak", "peak_bytes", "device_peak_bytes"),
    ("alloc_retries", None, "alloc_retries"),
)


def memory_terms(ranks: list[dict[str, Any]], predicted: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each term: the plan's bytes per GPU beside the largest any rank measured (None: not
    measured there, e.g. reserved bytes off CUDA), and each rank's figure."""
    parts = dict(predicted.get("peak_parts") or {})
    if parts.get("activations") is not None:  # the plan's activation peak holds its logits
        parts["activations"] = parts["activations"] + (parts.get("logits") or 0)
    parts["alloc_retries"] = 0
    out = []
    for term, pkey, mkey in TERMS:
        planned = parts.get(pkey) if pkey else parts.get(term)
        per_rank = [(r.get("memory") or {}).get(mkey) for r in ranks]
        out.append({"term": term, "planned": num(planned), "measured": rank_max(ranks, mkey),
                    "per_rank": per_rank})  # fmt: skip
    return out


def optimizer_time(ranks: list[dict[str, Any]], predicted: Mapping[str, Any]) -> dict[str, Any]:
    """The optimizer step's seconds (clipping and the update; each rank's median after the
    warm-up) beside the plan's: on a GPU its optimizer term, on CPU the same step on the host
    with one thread (what a CPU rank runs: the plan's `optimizer_host_s`)."""
    per_rank = [num((r.get("split_s") or {}).get("optimizer")) for r in ranks]
    seen = [v for v in per_rank if v is not None]
    cpu = ranks[0].get("device") != "cuda"
    planned = num(predicted.get("optimizer_host_s" if cpu else "optimizer_s_model"))
    return {"planned": planned, "measured": max(seen) if seen else None, "per_rank": per_rank,
            "planned_as": "the host, one thread" if cpu else "the GPU"}  # fmt: skip
