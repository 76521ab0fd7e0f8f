"""The GPU check's figures: one run's outcome against its plan, and the table to paste.

Measured: tokens/s is the median of the trainer's per-step figure after WARMUP_STEPS (the
first steps pay for allocator growth, kernel selection and the state measurement at step 2),
divided by the GPU count; peak memory is the largest `peak_mem_bytes` the trainer logged
(torch.cuda.max_memory_allocated; on CPU the process's peak RSS, which includes the Python
heap and libraries and so is no match for the plan). MFU = tokens/s per GPU x the planner's
model FLOPs per token (recompute excluded) / the GPU's dense bf16 peak from the catalog.
Stdlib only: it runs on the GPU machine.
"""

from __future__ import annotations

import statistics
from typing import Any

WARMUP_STEPS = 3


def mfu(tokens_per_s_per_gpu: float, flops_per_token: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: useful FLOPs per second over the dense bf16 peak."""
    return tokens_per_s_per_gpu * flops_per_token / (peak_tflops * 1e12)


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    return measured / predicted if measured and predicted else None


def summarize(expected: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    """One row: the plan's figures, what was measured, their ratios and the run's status."""
    out = {**expected, "predicted_peak_bytes": expected["peak_bytes"]}
    out["predicted_tokens_per_s_per_gpu"] = expected["tokens_per_s_per_gpu"]
    out["predicted_mfu"] = expected["mfu"]
    for key in ("peak_bytes", "tokens_per_s_per_gpu", "mfu"):
        out.pop(key)
    if raw is None:
        return {**out, "status": "skipped: not enough of the time budget left"}
    out.update({k: v for k, v in raw.items() if k != "metrics"})
    metrics = raw.get("metrics") or []
    out["steps_done"] = len(metrics)
    if not metrics:
        return out
    steady = metrics[WARMUP_STEPS:] or metrics[-1:]
    tps = statistics.median(m["tokens_per_s"] for m in steady) / expected["gpu_count"]
    peak = max(m["peak_mem_bytes"] for m in metrics)
    out.update(
        measured_tokens_per_s_per_gpu=round(tps, 1),
        measured_peak_bytes=peak,
        measured_mfu=(
            mfu(tps, expected["model_flops_per_token"], expected["peak_tflops"])
            if expected["peak_tflops"]
            else None
        ),
        tokens_ratio=_ratio(tps, expected["tokens_per_s_per_gpu"]),
        peak_ratio=_ratio(peak, expected["peak_bytes"]),
        final_loss=metrics[-1]["loss"],
    )
    return out


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 10**9 else f"{n / 1e6:.1f}M"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(plan: dict[str, Any], results: list[dict[str, Any]], device: str = "") -> str:
    """The markdown table, one row per prepared run (those not run yet: the plan's figures)."""
    runs = plan["runs"]
    peak = runs[0]["peak_tflops"] if runs else None
    on_cpu = plan["device"] == "cpu"
    lines = [
        f"gpu_check: planned for {plan['gpu']} x{plan['gpu_count']} ({device or plan['device']}), "
        f"seq {plan['seq']}, {plan['steps']} steps, tokens/s = median after {WARMUP_STEPS} "
        f"warm-up steps; MFU against {_f(peak, '.0f')} TFLOP/s dense bf16 (the planner's "
        "catalog) with the planner's model FLOPs per token (6N + 12 L qd s, no recompute)"
        + ("; CPU mode: peak is the process's RSS, MFU not meaningful" if on_cpu else ""),
        "",
        "| run | params | mbs | gc | status | peak plan GB | peak measured GB | ratio "
        "| tok/s/GPU plan | tok/s/GPU measured | ratio | MFU plan | MFU measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    done = {r["name"]: r for r in results}
    for run in runs:
        r = done.get(run["name"]) or summarize(run, {"status": "not run yet"})
        cells = [
            r["name"], _count(r["parameter_count"]), str(r["micro_batch_size"]),
            "on" if r["gradient_checkpointing"] else "off", str(r["status"]),
            _f(r["predicted_peak_bytes"] / 1e9, ".2f"),
            _f((r.get("measured_peak_bytes") or 0) / 1e9 or None, ".2f"),
            _f(r.get("peak_ratio"), ".2f"), _f(r["predicted_tokens_per_s_per_gpu"], ".0f"),
            _f(r.get("measured_tokens_per_s_per_gpu"), ".0f"), _f(r.get("tokens_ratio"), ".2f"),
            _f(r["predicted_mfu"] and 100 * r["predicted_mfu"], ".1f"),
            _f(None if on_cpu or r.get("measured_mfu") is None else 100 * r["measured_mfu"], ".1f"),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
