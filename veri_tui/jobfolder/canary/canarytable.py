"""The canary's table as text: measured beside planned for every term, the time split, the
extrapolated time and cost, and the gate's line (veri_tui/jobfolder/canary/canary.py decides; the
supervisor appends these lines to the rank-0 log, so every follower of the log sees them). Stdlib
only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LABELS = {
    "states": "states",
    "activations": "activations + logits",
    "loss": "loss (logits, chunk)",
    "in_flight": "units in flight",
    "optimizer_step": "optimizer step",
    "overhead": "overhead",
    "allocated_peak": "allocated peak",
    "reserved_peak": "reserved peak",
    "device_peak": "device peak",
    "alloc_retries": "allocator retries",
}


def no_go_line(record: Mapping[str, Any]) -> str:
    """The gate's one line of a job its canary stopped (`canary: no-go: ...`), else "": a
    no-go job is `cancelled` with no `error`, so this line is what says why (`veri-tui jobs`,
    the app's job list)."""
    gate = record.get("canary") or {}
    return str(gate.get("line") or "") if gate.get("decision") == "no-go" else ""


def money(value: float | None) -> str:
    """`$0.0123`: enough digits for a canary's small sums; `-` when unknown."""
    if value is None:
        return "-"
    return f"${value:.2f}" if value >= 10 else f"${value:.3g}"


def size(value: float | None) -> str:
    """Bytes as GB/MB/KB; `-` when not measured."""
    if value is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _row(term: Mapping[str, Any]) -> tuple[str, str, str, str]:
    fmt = (lambda v: "-" if v is None else f"{v:.0f}") if term["term"] == "alloc_retries" else size
    p, m = term.get("planned"), term.get("measured")
    ratio = f"{m / p:.3g}x" if p and m is not None else "-"
    return LABELS.get(term["term"], term["term"]), fmt(p), fmt(m), ratio


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  " + "  ".join([r[0].ljust(widths[0]), *(c.rjust(w) for c, w in
                                                      zip(r[1:], widths[1:], strict=True))])
            for r in rows]  # fmt: skip


SPLIT = {"forward_backward": "forward/backward", "after_update": "after update"}


def _optimizer_line(opt: Mapping[str, Any]) -> list[str]:
    """The optimizer step's time beside the plan's: `  optimizer (clip + update): ...`."""
    m, p = opt.get("measured"), opt.get("planned")
    if m is None:
        return []
    ranks = ", ".join("-" if v is None else f"{v:.3g}" for v in opt.get("per_rank") or [])
    vs = f"; planned {p:.3g} s ({opt.get('planned_as')}): {m / p:.3g}x" if p else ""
    return [f"  optimizer (clip + update): {m:.3g} s on the slowest rank (ranks: {ranks} s)"
            f"{vs}"]  # fmt: skip


def _time_lines(block: Mapping[str, Any]) -> list[str]:
    t, planned = block.get("time") or {}, block.get("planned") or {}
    split = t.get("split_s") or {}
    parts = " + ".join(f"{SPLIT.get(k, k)} {v:.3g} s" for k, v in split.items() if k != "save")
    out = [f"  step time (median after warm-up): {parts or '-'}; checkpoint save "
           f"{t.get('save_s') or 0:.3g} s, load back {t.get('load_s') or 0:.3g} s"]  # fmt: skip
    out += _optimizer_line(block.get("optimizer") or {})
    ext = block.get("extrapolated") or {}
    if not ext.get("known"):
        return [*out, "  extrapolated: - (no steady step to time)"]
    rate, plan = ext["tokens_per_s"], planned.get("tokens_per_s")
    vs = f" (planned {plan:,.0f}: {rate / plan:.3g}x)" if plan else ""
    out.append(f"  tokens/s after {t.get('warmup_steps') or 0} warm-up step(s): {rate:,.0f}{vs}")
    lo, hi = ext["hours_band"]
    where = f"{block.get('gpu_count')} x {block.get('planned_gpu') or '?'}"
    line = (f"  extrapolated: {ext['hours']:.3g} h (band {lo:.3g}-{hi:.3g} h) = "
            f"{ext['gpu_hours']:.3g} GPU-hours on {where}")  # fmt: skip
    if ext.get("cost") is not None:
        clo, chi = ext["cost_band"]
        line += (f", {money(ext['cost'])} (band {money(clo)}-{money(chi)}) at "
                 f"${ext['price_per_gpu_hour']:g}/GPU-hour")  # fmt: skip
    return [*out, line]


def canary_lines(block: Mapping[str, Any]) -> list[str]:
    """The table and the decision, as the log shows them."""
    where = block.get("device_name") or block.get("device") or "?"
    head = (f"canary: {block.get('steps')} steps on {where} x{block.get('ranks')} (the longest "
            f"samples first), planned for {block.get('planned_gpu') or '?'} "
            f"x{block.get('gpu_count')}")  # fmt: skip
    rows = [("term", "planned", "measured", "ratio"), *map(_row, block.get("terms") or [])]
    limits = block.get("limits") or {}
    head_room = limits.get("headroom")
    judged = (f"max cost {money(limits.get('max_cost'))}, max hours "
              f"{limits.get('max_hours') if limits.get('max_hours') is not None else '-'}, "
              f"headroom {head_room if head_room is not None else 0.1:.0%}")  # fmt: skip
    tail = [block["line"]] if block.get("decision") == "no-go" else [f"canary: go ({judged})"]
    more = [f"canary: also: {f}" for f in (block.get("failed") or [])[1:]]
    return [head, *_table(rows), *_time_lines(block), *tail, *more]
