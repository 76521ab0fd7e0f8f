"""`veri-tui plan --trace`: the trace's JSON beside the plan's record, its summary line and
phase table, and one line for what it cannot do (no trainer packages, no local model,
another host)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from launch_helpers import cli
from support.fakecuda import checkpoint
from support.synthetic import QWEN3_0_6B

from veri_tui.errors import VeriError
from veri_tui.launch import tracing

PHASE_KEYS = {"peak_allocated_bytes", "ops", "flops", "bytes"}


def test_plan_json_carries_the_trace(tmp_path: Path) -> None:
    """Qwen3-0.6B's widths at 2 layers on 2 GPUs: the `trace` object as the issue words it."""
    model = checkpoint(tmp_path / "qwen3", QWEN3_0_6B, layers=2)
    done = cli("plan", "--model", str(model), "--gpu", "H100-80GB", "--gpu-count", "2",
               "--set", "zero_stage=3", "--trace", "--json", timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["trace"]
    assert set(trace) == {"peak_allocated_bytes", "seconds", "ranks", "device", "phases"}
    assert trace["ranks"] == 2 and trace["device"] == "cuda" and trace["seconds"] > 0
    assert {"load", "forward", "backward", "optimizer step"} <= set(trace["phases"])
    assert all(set(p) == PHASE_KEYS for p in trace["phases"].values())
    peaks = [p["peak_allocated_bytes"] for p in trace["phases"].values()]
    assert trace["peak_allocated_bytes"] == max(peaks) > 0
    assert trace["phases"]["backward"]["flops"] > trace["phases"]["forward"]["flops"] > 0


def test_the_summary_line_and_table() -> None:
    phases = {"forward": {"peak_allocated_bytes": 14_100_000_000, "ops": 31_044,
                          "flops": 2.1e14, "bytes": 5.5e11}}  # fmt: skip
    trace = {"peak_allocated_bytes": 15_100_000_000, "seconds": 31.2, "ranks": 8,
             "device": "cuda", "phases": phases}  # fmt: skip
    rec = SimpleNamespace(activations={"peak": {"allocated_bytes": 15_205_700_000}})
    assert tracing.trace_line(trace, rec) == (
        "trace: peak 15.1 GB allocated per GPU (8 fake ranks, 31 s) vs plan 15.2 GB (+0.7%)"
    )
    head, row = tracing.trace_table(trace)
    assert head.split() == ["phase", "peak", "GB", "ops", "TFLOP", "GB", "moved"]
    assert row.split() == ["forward", "14.1", "31,044", "210.0", "550.0"]


def test_what_it_cannot_do_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tracing.importlib.util.find_spec
    monkeypatch.setattr(tracing.importlib.util, "find_spec",
                        lambda name: None if name == "torch" else real(name))  # fmt: skip
    with pytest.raises(VeriError, match=r"torch not installed; needs the trainer's packages"):
        tracing.trace_job(SimpleNamespace(), SimpleNamespace())
    monkeypatch.undo()
    job = SimpleNamespace(model="org/not-here", dataset=None)
    rec = SimpleNamespace(to_dict=lambda: {"model": {}})
    with pytest.raises(VeriError, match=r"not a model folder on this machine; --trace reads"):
        tracing.trace_spec(job, rec, tmp_path)
    done = cli("plan", "--trace", "--host", "gpu-box", "--model", str(tmp_path))
    assert done.returncode == 2 and not done.stdout
    assert re.fullmatch(r"error: trace: --trace runs here.*drop --host/--slurm\n", done.stderr)
