"""`veri-tui plan --trace` and the app's Trace: the bundled trainer's own step at the job's
real shapes on fake CUDA devices (docs/trace.md), beside the plan.

The job spec is the one a launch writes (spec.make_record: the plan's resolved knobs, the
job's hyperparameters), in a temporary job folder; `python -m veri_tui.trainer.fakecuda`
runs it with this interpreter in a child process (the launcher side imports no torch, as
for `veri-tui export`) and prints its figures. What comes back is the `trace` object of
`veri-tui plan --json`: peak_allocated_bytes, seconds, ranks, device and, per phase, its
peak_allocated_bytes, ops, flops and bytes. It needs the `[train]` extra (torch 2.13.0,
transformers) and a model folder on this machine; no compiler, no GPU.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veri_tui.errors import Refusal, VeriError

#: A trace of a 70B job on 2 cores takes minutes (ops, not sizes, cost time): the longest wait.
TRACE_TIMEOUT_S = 1800.0
PHASE_KEYS = ("peak_allocated_bytes", "ops", "flops", "bytes")
NEEDS = "needs the trainer's packages (torch 2.13.0, transformers): pip install 'veri-tui[train]'"


def missing_packages() -> str | None:
    """Why this machine cannot trace (a refusal's text), or None. Looked up, not imported."""
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    return f"trace: {', '.join(missing)} not installed; {NEEDS}" if missing else None


def trace_spec(job: Any, rec: Any, job_dir: Path) -> dict[str, Any]:
    """The job spec a launch of `job` planned as `rec` would write, paths in `job_dir`."""
    from veri_tui.launch.spec import make_record

    path = (rec.to_dict().get("model") or {}).get("path")
    if not path or not (Path(path) / "config.json").is_file():
        raise VeriError(Refusal(
            "model", f"{job.model} is not a model folder on this machine; --trace reads its "
            "config.json and safetensors headers (header-only files suffice): pass --model DIR",
        ))  # fmt: skip
    dataset = job.dataset if isinstance(job.dataset, str) else str(job_dir / "rows.jsonl")
    record = make_record(job, rec, "trace", model_path=str(Path(path).resolve()),
                         dataset=dataset, output_dir=str(job_dir / "output"))  # fmt: skip
    return dict(record["spec"])


def trace_job(job: Any, rec: Any, timeout: float = TRACE_TIMEOUT_S) -> dict[str, Any]:
    """Trace `job` (planned as `rec`) in a child process; the `trace` object. VeriError
    with one line when it cannot (packages missing, no local model, the trace failed)."""
    refusal = missing_packages()
    if refusal:
        raise VeriError(Refusal("trace", refusal.removeprefix("trace: ")))
    with tempfile.TemporaryDirectory(prefix="veri-trace-") as tmp:
        job_dir = Path(tmp)
        spec = trace_spec(job, rec, job_dir)
        (job_dir / "job.json").write_text(json.dumps({"spec": spec}), encoding="utf-8")
        cmd = [sys.executable, "-m", "veri_tui.trainer.fakecuda",
               "--job", str(job_dir / "job.json"), "--gpus-per-node",
               str(spec["nproc_per_node"]), "--gpu-name", str(job.gpu)]  # fmt: skip
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise VeriError(Refusal("trace", f"gave up after {timeout:.0f} s")) from None
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = lines[-1].removeprefix("error: ") if lines else f"exit status {done.returncode}"
        raise VeriError(Refusal("trace", why))
    return as_trace(json.loads(done.stdout), seconds)


def as_trace(summary: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The trace's JSON (`veri-tui plan --json`'s `trace`) from the child's summary."""
    phases = {
        name: {k: int(figures[k]) for k in PHASE_KEYS}
        for name, figures in summary["phases"].items()
    }
    return {"peak_allocated_bytes": int(summary["peak_allocated_bytes"]),
            "seconds": round(seconds, 1), "ranks": int(summary["ranks"]),
            "device": summary["device"], "phases": phases}  # fmt: skip


def trace_line(trace: dict[str, Any], rec: Any) -> str:
    """`trace: peak 15.1 GB allocated per GPU (8 fake ranks, 31 s) vs plan 15.2 GB (+0.7%)`:
    the plan's allocated peak (its peak less the overhead outside tensors) against the
    trace's, as a share of the trace's."""
    traced = trace["peak_allocated_bytes"]
    planned = rec.activations["peak"]["allocated_bytes"]
    diff = f"{(planned - traced) / traced:+.1%}" if traced else "n/a"
    return (f"trace: peak {traced / 1e9:.1f} GB allocated per GPU ({trace['ranks']} fake ranks,"
            f" {trace['seconds']:.0f} s) vs plan {planned / 1e9:.1f} GB ({diff})")  # fmt: skip


def trace_table(trace: dict[str, Any]) -> list[str]:
    """One row per phase: its allocated peak, aten ops, FLOPs and bytes moved."""
    rows = [f"  {'phase':<16}{'peak GB':>9}{'ops':>9}{'TFLOP':>10}{'GB moved':>10}"]
    for name, p in trace["phases"].items():
        rows.append(f"  {name:<16}{p['peak_allocated_bytes'] / 1e9:>9.1f}{p['ops']:>9,}"
                    f"{p['flops'] / 1e12:>10.1f}{p['bytes'] / 1e9:>10.1f}")  # fmt: skip
    return rows
