"""The GPU check's figures: one run's outcome against its plan, and the table to paste.

Measured: tokens/s is the median of the trainer's per-step figure after WARMUP_STEPS (the
first steps pay for allocator growth, kernel selection and the state measurement at step 2),
divided by the GPU count. Memory comes from job.json's `measured` (veri_tui/trainer/devmem.py): the
allocated peak (torch.cuda.max_memory_allocated) and the reserved peak, each against the
planner's allocated bytes (veri_tui/plan/peak.py, the optimizer step's temporary included),
the driver's device figure (NVML / nvidia-smi) against that plus the plan's 2 GiB overhead,
the device figure beyond reserved against that overhead term, the allocator's retries and
whether it ran with expandable segments (as the allocator says). On CPU the peak is the
process's peak RSS, which includes the Python heap and libraries and so is no match for the
plan; there is no device figure.
MFU = tokens/s per GPU x the planner's model FLOPs per token (recompute excluded) / the
GPU's dense bf16 peak from the catalog.
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
    """One row: the plan's figures, what was measured, their ratios and the run's status.

    Memory is set against the planner's own peak terms (expected: `peak_bytes`, its allocated
    bytes with the optimizer step's temporary; `device_peak_bytes`, that plus the overhead):
    allocated and reserved against the first, the driver's device figure against the second.
    """
    out = {**expected, "predicted_peak_bytes": expected["peak_bytes"]}
    out["predicted_device_bytes"] = expected.get("device_peak_bytes")
    out["predicted_tokens_per_s_per_gpu"] = expected["tokens_per_s_per_gpu"]
    out["predicted_mfu"] = expected["mfu"]
    for key in ("peak_bytes", "device_peak_bytes", "tokens_per_s_per_gpu", "mfu"):
        out.pop(key, None)
    if raw is None:
        return {**out, "status": "not run: not enough of the time budget left"}
    out.update({k: v for k, v in raw.items() if k != "metrics"})
    metrics = raw.get("metrics") or []
    out["steps_done"] = len(metrics)
    meas = raw.get("job_measured") or {}
    peak = meas.get("peak_bytes") if meas.get("device") == "cuda" else None
    peak = peak or max((m.get("peak_mem_bytes") or 0 for m in metrics), default=0) or None
    reserved = meas.get("peak_reserved_bytes") or max(
        (m.get("peak_reserved_bytes") or 0 for m in metrics), default=0
    ) or None  # fmt: skip
    device = meas.get("device_memory_bytes")
    # Beyond the allocator's segments: the CUDA context, cuBLAS' workspaces, NCCL's buffers
    # (the plan's overhead term). Both figures are peaks (NVML's the largest sample): an
    # estimate of the term, the one a single GPU gives.
    overhead = device - reserved if device and reserved else None
    planned_overhead = (expected.get("peak_parts") or {}).get("overhead")
    out.update(
        measured_overhead_bytes=overhead,
        overhead_ratio=_ratio(overhead, planned_overhead),
        expandable_segments=meas.get("expandable_segments"),
    )
    out.update(
        measured_peak_bytes=peak, measured_reserved_bytes=reserved,
        measured_device_bytes=device,
        device_memory_source=meas.get("device_memory_source"),
        alloc_retries=meas.get("alloc_retries"),
        peak_ratio=_ratio(peak, expected["peak_bytes"]),
        reserved_ratio=_ratio(reserved, expected["peak_bytes"]),
        device_ratio=_ratio(device, expected.get("device_peak_bytes")),
    )  # fmt: skip
    if not metrics:
        return out
    steady = metrics[WARMUP_STEPS:] or metrics[-1:]
    tps = statistics.median(m["tokens_per_s"] for m in steady) / expected["gpu_count"]
    out.update(
        measured_tokens_per_s_per_gpu=round(tps, 1),
        measured_mfu=(
            mfu(tps, expected["model_flops_per_token"], expected["peak_tflops"])
            if expected["peak_tflops"]
            else None
        ),
        tokens_ratio=_ratio(tps, expected["tokens_per_s_per_gpu"]),
        final_loss=metrics[-1]["loss"],
    )
    return out


#: A run whose status starts so could not be judged on this machine (QLoRA without its
#: bitsandbytes): reported, never failed. Every other status but PASSED fails the check,
#: a run the time budget left out included (the budget is the check's to keep).
NOT_JUDGED, PASSED = "not judged", "succeeded"


def judge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """{"passed", "not_judged", "failed": [names], "exit_code", "line"}: exit 0 when every
    run that could be judged passed (and at least one did)."""
    verdict: dict[str, Any] = {"passed": [], "not_judged": [], "failed": []}
    for r in rows:
        status = str(r.get("status"))
        key = "passed" if status == PASSED else (
            "not_judged" if status.startswith(NOT_JUDGED) else "failed")  # fmt: skip
        verdict[key].append(r["name"])
    ok = not verdict["failed"] and bool(verdict["passed"])
    verdict["exit_code"] = 0 if ok else 1
    verdict["line"] = (
        f"gpu_check: {len(verdict['passed'])} passed, {len(verdict['not_judged'])} not judged"
        + (f" ({', '.join(verdict['not_judged'])})" if verdict["not_judged"] else "")
        + f", {len(verdict['failed'])} failed"
        + (f" ({', '.join(verdict['failed'])})" if verdict["failed"] else "")
        + f": exit {verdict['exit_code']}"
    )
    return verdict


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 10**9 else f"{n / 1e6:.1f}M"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _gb(value: float | None) -> str:
    return "-" if not value else f"{value / 1e9:.2f}"


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
        "| run | covers | status | alloc plan GB | alloc GB | ratio | reserved GB | ratio "
        "| device plan GB | device GB | ratio | retries | tok/s/GPU plan | tok/s/GPU | ratio "
        "| MFU plan | MFU |",
        "|" + "---|" * 17,
    ]
    done = {r["name"]: r for r in results}
    for run in runs:
        r = done.get(run["name"]) or summarize(run, {"status": "not run yet"})
        what = ", ".join(r.get("covers") or []) or (
            f"{_count(r['parameter_count'])} mbs {r['micro_batch_size']} "
            f"gc {'on' if r['gradient_checkpointing'] else 'off'}"
        )
        cells = [
            r["name"], what, str(r["status"]), _gb(r["predicted_peak_bytes"]),
            _gb(r.get("measured_peak_bytes")), _f(r.get("peak_ratio"), ".2f"),
            _gb(r.get("measured_reserved_bytes")), _f(r.get("reserved_ratio"), ".2f"),
            _gb(r.get("predicted_device_bytes")), _gb(r.get("measured_device_bytes")),
            _f(r.get("device_ratio"), ".2f"), _f(r.get("alloc_retries"), "d"),
            _f(r["predicted_tokens_per_s_per_gpu"], ".0f"),
            _f(r.get("measured_tokens_per_s_per_gpu"), ".0f"), _f(r.get("tokens_ratio"), ".2f"),
            _f(r["predicted_mfu"] and 100 * r["predicted_mfu"], ".1f"),
            _f(None if on_cpu or r.get("measured_mfu") is None else 100 * r["measured_mfu"], ".1f"),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
