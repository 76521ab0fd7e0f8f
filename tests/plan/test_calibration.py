"""Calibration: the update rule (toward the measurement, never past it, bounded), folding
finished job records (idempotent, per GPU type and host, CPU apart), later plans using it and
saying so, and a corrupt file as one warning line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veri_tui.cli import main
from veri_tui.commands.plan import summary_lines
from veri_tui.launch import calibrate
from veri_tui.launch.measured import predicted_of
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.calibration import (
    RATIO_MAX,
    RATIO_MIN,
    calibration_path,
    clip_ratio,
    updated_factor,
)

ratio = st.floats(min_value=0.01, max_value=100.0)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    return tmp_path


@given(old=st.one_of(st.none(), st.floats(RATIO_MIN, RATIO_MAX)), runs=st.lists(ratio, min_size=1))
def test_update_moves_toward_the_measurement_never_past_it(old, runs: list[float]) -> None:
    clipped = [clip_ratio(r) for r in runs]
    new = updated_factor(old, clipped)
    before = 1.0 if old is None else old
    assert min(before, clipped[-1]) <= new <= max(before, clipped[-1])
    assert RATIO_MIN <= new <= RATIO_MAX


def test_one_odd_run_cannot_swing_a_settled_factor() -> None:
    factor = None
    history: list[float] = []
    for r in [0.8] * 5 + [0.01]:  # the odd run is clipped to 0.5, then outvoted
        history.append(clip_ratio(r))
        factor = updated_factor(factor, history)
    assert factor == 0.8
    assert updated_factor(None, [0.6]) == pytest.approx(0.8)  # a first run moves it halfway


def _plan(gpu: str = "H100-80GB", host: str | None = None) -> Any:
    return plan_job(load_job_config(None, gpu=gpu, gpu_count=2), host=host)


def _run(job_id: str, plan: Any, tps_ratio: float, act_ratio: float, **kw: Any) -> dict:
    """A job record as the supervisor leaves a completed CUDA run (CUDA is mocked: figures)."""
    pred = predicted_of(plan.to_dict())
    states = pred["states_bytes"]
    peak = states + pred["transient_gather_bytes"] + act_ratio * pred["activations_model_bytes"]
    measured = {"device": "cuda", "gpu": plan.gpu["name"], "ranks": 2, "final": True}
    measured.update(steps_timed=3, states_bytes=states, peak_bytes=int(peak))
    measured["tokens_per_s"] = tps_ratio * pred["tokens_per_s_model"]
    record = {"job_id": job_id, "status": "succeeded", "host": None, "predicted": pred}
    return {**record, "measured": {**measured, **kw.pop("measured", {})}, **kw}


def test_later_plans_use_the_calibration_and_say_so(home: Path) -> None:
    base = _plan()
    model_tps = base.throughput["tokens_per_s"]
    assert calibrate.fold_jobs([_run("j1", base, 0.7, 1.2)]) == ["j1"]
    once = _plan()
    # Toward the measurement (0.7 x the model), not past it: halfway after one run.
    assert once.throughput["tokens_per_s"] == pytest.approx(0.85 * model_tps)
    assert "(calibrated from 1 run on H100-80GB)" in summary_lines(once)[1]
    calibrate.fold_jobs([_run("j2", once, 0.7, 1.2), _run("j3", once, 0.7, 1.2)])
    later = _plan()
    assert later.throughput["tokens_per_s"] == pytest.approx(0.7 * model_tps)
    assert later.throughput["step_time_s"] == pytest.approx(base.throughput["step_time_s"] / 0.7)
    assert later.activations["bytes_per_gpu"] == pytest.approx(
        1.2 * base.activations["bytes_per_gpu"], rel=1e-6
    )
    assert later.activations["max_micro_batch_size"] < base.activations["max_micro_batch_size"]
    act_line, tp_line = summary_lines(later)[:2]
    assert tp_line.startswith("throughput: ~") and tp_line.endswith(
        "(calibrated from 3 runs on H100-80GB)"
    )
    assert act_line.endswith("(calibrated from 3 runs on H100-80GB)")
    # The ratios are taken against the model's figure, so calibrated plans never compound.
    entry = json.loads(calibration_path().read_text())["entries"]["H100-80GB@local"]
    assert [r["efficiency_ratio"] for r in entry["runs"]] == [0.7, 0.7, 0.7]
    assert _plan("A100-80GB").throughput.get("calibration") is None  # another GPU type


def test_folding_is_once_per_job_and_only_completed_measured_runs(home: Path) -> None:
    plan = _plan()
    run = _run("j1", plan, 0.5, 1.0)
    assert calibrate.fold_jobs([run]) == ["j1"]
    assert calibrate.fold_jobs([run]) == []
    failed = _run("j2", plan, 0.5, 1.0, status="failed")
    unfinished = _run("j3", plan, 0.5, 1.0, measured={"final": False})
    assert calibrate.fold_jobs([failed, unfinished]) == []
    data = json.loads(calibration_path().read_text())
    assert data["folded"] == ["j1"] and len(data["entries"]["H100-80GB@local"]["runs"]) == 1


def test_cpu_runs_and_other_hosts_do_not_change_local_gpu_plans(home: Path) -> None:
    plan = _plan()
    cpu = _run("c1", plan, 0.001, 30.0, measured={"device": "cpu", "gpu": "cpu"})
    remote = _run("r1", plan, 0.6, 1.0, host="gpu-box")
    assert calibrate.fold_jobs([cpu, remote]) == ["c1", "r1"]
    entries = json.loads(calibration_path().read_text())["entries"]
    assert sorted(entries) == ["H100-80GB@gpu-box", "cpu@local"]
    assert entries["cpu@local"]["runs"][0]["efficiency_ratio"] == RATIO_MIN  # clipped
    assert _plan().throughput["tokens_per_s"] == plan.throughput["tokens_per_s"]
    there = _plan(host="gpu-box")
    assert "(calibrated from 1 run on H100-80GB at gpu-box)" in summary_lines(there)[1]


def test_reset_forgets_factors_but_not_which_jobs_were_folded(home: Path, capsys) -> None:
    plan = _plan()
    run = _run("j1", plan, 0.5, 1.0)
    calibrate.fold_jobs([run])
    assert main(["calibrate", "--show"]) == 0
    assert "H100-80GB@local: efficiency 0.75 (1 run)" in capsys.readouterr().out
    assert main(["calibrate", "--reset"]) == 0
    assert calibrate.fold_jobs([run]) == []  # read again later: not folded back in
    assert _plan().throughput.get("calibration") is None
    assert main(["calibrate"]) == 0
    assert "no calibration yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "not JSON"),
        ('{"entries": [1, 2]}', "no 'entries' object"),
        ("\udcff", "not JSON"),
    ],
)
def test_a_corrupt_file_is_one_warning_not_a_traceback(home: Path, content: str, why: str) -> None:
    path = calibration_path()
    path.write_bytes(content.encode("utf-8", "surrogateescape"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "veri_tui", *args], capture_output=True, text=True, check=False
        )

    plan = cli("plan", "--gpu", "H100-80GB")
    assert plan.returncode == 0 and "Traceback" not in plan.stderr
    warned = [ln for ln in plan.stdout.splitlines() if ln.startswith("warning: calibration:")]
    assert len(warned) == 1 and f"{path}: {why}" in warned[0]
    assert warned[0].endswith("; ignored (veri-tui calibrate --reset)")
    assert "calibrated" not in plan.stdout
    show = cli("calibrate", "--show")
    assert show.returncode == 0 and "Traceback" not in show.stderr
    assert show.stderr.startswith(f"warning: calibration: {path}: {why}")
    assert cli("calibrate", "--reset").returncode == 0
    again = cli("plan", "--gpu", "H100-80GB")
    assert again.returncode == 0 and "warning: calibration" not in again.stdout


def test_out_of_range_factor_in_the_file_is_not_used(home: Path) -> None:
    entry = {"gpu": "H100-80GB", "host": "local", "efficiency": 40.0, "runs": []}
    calibration_path().write_text(json.dumps({"entries": {"H100-80GB@local": entry}}))
    assert _plan().throughput.get("calibration") is None
