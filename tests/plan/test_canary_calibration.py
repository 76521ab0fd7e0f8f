"""A canary's block folds into the calibration (CUDA mocked: figures): every term it
measured, beside the plan's, and its overhead, which the next plan on that GPU takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veri_tui.commands.plan import summary_lines
from veri_tui.jobfolder.canary.canary import judge
from veri_tui.launch import calibrate
from veri_tui.launch.measured import predicted_of
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.calibration import calibration_path
from veri_tui.plan.peak import peak_line


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    return tmp_path


def _plan() -> Any:
    return plan_job(load_job_config(None, gpu="H100-80GB", gpu_count=2))


def _canary_record(job_id: str, plan: Any, overhead: int, optimizer_x: float = 1.0
                   ) -> dict[str, Any]:  # fmt: skip
    """A job whose canary ran on CUDA: the terms as a GPU would have measured them."""
    pred = predicted_of(plan.to_dict())
    parts = pred["peak_parts"]
    allocated = parts["allocated_bytes"]
    memory = {"states_bytes": parts["states"], "activations_bytes": 2 * parts["activations"],
              "loss_bytes": 1000, "in_flight_bytes": parts["in_flight"],
              "optimizer_step_bytes": parts["optimizer_step_bytes"],
              "allocated_peak_bytes": allocated, "reserved_peak_bytes": allocated + 10**8,
              "device_peak_bytes": allocated + overhead, "overhead_bytes": overhead,
              "alloc_retries": 0, "capacity_bytes": 80 * 10**9}  # fmt: skip
    tps = 0.8 * pred["tokens_per_s_model"]
    rank = {"rank": 0, "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "steps": 3,
            "total_steps": 100, "warmup_steps": 1, "step_s": [3.0, 1.0, 1.0],
            "tokens": [tps] * 3, "rates": [tps / 3, tps, tps], "setup_s": {"model": 5.0},
            "tokens_total": 100 * tps, "saves_planned": 1, "save_s": 2.0, "resume_ok": True,
            "memory": memory,
            "split_s": {"optimizer": optimizer_x * pred["optimizer_s"]}}  # fmt: skip
    block = judge([rank], {"gpu_count": 2, "canary": {"steps": 3}}, pred)
    return {"job_id": job_id, "status": "running", "host": None, "predicted": pred,
            "canary": block}  # fmt: skip


def test_a_canary_calibrates_every_term_and_the_overhead(home: Path) -> None:
    base = _plan()
    assert "(overhead calibrated" not in peak_line(base.activations["peak"])
    record = _canary_record("c1", base, overhead=3 * 10**9)
    assert record["canary"]["decision"] == "go"
    assert calibrate.fold_jobs([record]) == ["c1:canary"]
    assert calibrate.fold_jobs([record]) == []  # once
    run = json.loads(calibration_path().read_text())["entries"]["H100-80GB@local"]["runs"][0]
    assert set(run["terms"]) >= {
        "states",
        "activations",
        "loss",
        "in_flight",
        "optimizer_step",
        "overhead",
        "allocated_peak",
        "reserved_peak",
        "device_peak",
    }
    assert run["overhead_bytes"] == 3 * 10**9 and run["efficiency_ratio"] == pytest.approx(0.8)
    later = _plan()
    peak = later.activations["peak"]
    assert peak["parts"]["overhead"] == 3 * 10**9
    assert peak["peak_bytes"] == peak["allocated_bytes"] + 3 * 10**9
    assert "(overhead calibrated from 1 run)" in peak_line(peak)
    assert summary_lines(later)[1].endswith("(calibrated from 1 run on H100-80GB)")
    assert later.activations["bytes_per_gpu"] > base.activations["bytes_per_gpu"]


def test_a_canary_calibrates_the_optimizer_term(home: Path) -> None:
    """The slowest rank's clipping and update over the plan's optimizer term folds as the
    optimizer factor: the next plan's term is scaled by it (then by the efficiency)."""
    base = _plan()
    opt = base.throughput["optimizer_s"]
    assert opt > 0 and base.throughput["optimizer"]["way"] == "eager"  # the bundled tiny model
    record = _canary_record("c2", base, overhead=3 * 10**9, optimizer_x=1.6)
    block = record["canary"]
    assert block["optimizer"]["planned"] == pytest.approx(opt)
    assert block["optimizer"]["planned_as"] == "the GPU"
    assert calibrate.fold_jobs([record]) == ["c2:canary"]
    entry = json.loads(calibration_path().read_text())["entries"]["H100-80GB@local"]
    assert entry["runs"][0]["optimizer_ratio"] == pytest.approx(1.6)
    assert entry["optimizer"] == pytest.approx(1.3)  # the median of 1.6 and the prior 1.0
    later = _plan().throughput
    eff = later["calibration"]["efficiency"]
    assert later["optimizer_s"] == pytest.approx(opt * 1.3 / eff)
    assert later["calibration"]["model_optimizer_s"] == pytest.approx(opt)
    parts = later["compute_s"] + later["exposed_communication_s"] + later["optimizer_s"]
    assert later["step_time_s"] == pytest.approx(parts)
