"""The canary's gate without a run: judging rank records, the table, the supervisor's watch,
the worst-case order, the command line's flags and the calibration a canary folds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from veri_tui.commands.launch import canary_of, outcome_line
from veri_tui.errors import VeriError
from veri_tui.jobfolder.canary.canary import (
    CanaryWatch,
    judge,
    outcome_file,
    rank_file,
    read_decision,
)
from veri_tui.jobfolder.canary.canarytable import canary_lines
from veri_tui.trainer.data import epoch_order, longest_first

PREDICTED = {
    "gpu": "L4-24GB",
    "tokens_per_s": 1000.0,
    "tokens_per_s_model": 1000.0,
    "step_time_s": 1.0,
    "price_per_gpu_hour": 2.0,
    "activations_model_bytes": 400,
    "peak_parts": {"states": 1000, "activations": 300, "logits": 100, "in_flight": 0,
                   "optimizer_step": 0, "overhead": 2**31, "allocated_bytes": 1400,
                   "peak_bytes": 1400 + 2**31, "optimizer_step_bytes": 250,
                   "logits_and_loss_bytes": 200},
}  # fmt: skip


def rank(r: int, step_s: float = 1.0, peak: int = 1_000_000, ok: bool = True) -> dict:
    """A rank's canary record as veri_tui/trainer/canaryrecord.py writes it: 3 steps of 1,000
    tokens, a job of 1,000 steps (10 s of set-up, 1 s saves)."""
    return {
        "rank": r, "device": "cpu", "steps": 3, "total_steps": 1000, "warmup_steps": 1,
        "step_s": [5.0, step_s, step_s * 1.5], "tokens": [1000.0] * 3,
        "rates": [200.0, 1000.0 / step_s, 1000.0 / (step_s * 1.5)],
        "split_s": {"data": 0.1, "forward_backward": 0.8, "optimizer": 0.1, "save": 1.0},
        "save_s": 1.0, "load_s": 0.5, "setup_s": {"model": 10.0}, "tokens_total": 1e6,
        "saves_planned": 1, "resume_ok": ok, "resume_error": None if ok else "boom",
        "memory": {"states_bytes": 1000, "activations_bytes": 350, "loss_bytes": 90,
                   "in_flight_bytes": 0, "optimizer_step_bytes": 200,
                   "allocated_peak_bytes": 1400, "device_peak_bytes": peak,
                   "overhead_bytes": peak - 1400, "capacity_bytes": 10_000_000},
    }  # fmt: skip


def spec(**limits: float) -> dict:
    return {"gpu_count": 2, "canary": {"steps": 3, **limits}}


def test_go_extrapolates_with_a_band_and_sets_every_term_beside_the_plan() -> None:
    block = judge([rank(0), rank(1)], spec(max_cost=10.0), PREDICTED)
    assert block["decision"] == "go" and block["failed"] == []
    ext = block["extrapolated"]
    low, high = ext["hours_band"]
    assert low <= ext["hours"] <= high
    # 997 of 1,000 steps' tokens to go at the median steady rate, + set-up, the 3 steps, a save
    rate = (1000 + 1000 / 1.5) / 2
    assert ext["hours"] == pytest.approx((10 + 7.5 + 1 + 1e6 * 0.997 / rate) / 3600)
    assert high == pytest.approx((10 + 7.5 + 1 + 1.5 * 997) / 3600)  # every step the slowest
    assert ext["cost"] == pytest.approx(ext["hours"] * 2 * 2.0)
    terms = {t["term"]: t for t in block["terms"]}
    assert terms["activations"]["planned"] == 400  # the plan's activations + logits
    assert terms["optimizer_step"]["planned"] == 250 and terms["loss"]["measured"] == 90
    assert terms["reserved_peak"]["measured"] is None  # not measured on CPU
    lines = canary_lines(block)
    assert lines[0].startswith("canary: 3 steps on cpu x2") and lines[-1].startswith("canary: go")
    assert any(ln.strip().startswith("activations + logits") and "0.875x" in ln for ln in lines)
    assert any("extrapolated:" in ln and "$" in ln for ln in lines)


def test_each_gate_names_its_limit_and_the_knob() -> None:
    over = judge([rank(0), rank(1)], spec(max_cost=0.01, max_hours=0.01), PREDICTED)
    assert over["decision"] == "no-go"
    assert over["line"].startswith("canary: no-go: --max-cost 0.01: extrapolated $")
    assert "(band $" in over["line"]
    # More GPUs cut the time, not the cost: each limit names the knobs that move it.
    assert over["failed"][0].endswith(
        "; lower max_steps or num_epochs, or a cheaper GPU type (more GPUs shorten the run, not "
        "its cost); or raise --max-cost"
    )
    assert over["failed"][1].startswith("--max-hours 0.01: extrapolated")
    assert over["failed"][1].endswith("; lower max_steps or num_epochs, or add GPUs, or raise "
                                      "--max-hours")  # fmt: skip
    full = judge([rank(0), rank(1, peak=9_500_000)], spec(headroom=0.1), PREDICTED)
    assert full["line"].startswith("canary: no-go: --headroom 0.1: peak 0.0095 GB of 0.01 GB")
    assert (
        "; largest states: zero_stage, lora_rank or gpu_count, or lower --headroom" in full["line"]
    )
    broken = judge([rank(0), rank(1, ok=False)], spec(), PREDICTED)
    assert broken["line"] == ("canary: no-go: resume check: rank 1: boom; the job could not "
                              "resume from its checkpoints")  # fmt: skip


def test_no_price_cannot_pass_a_cost_limit() -> None:
    block = judge([rank(0)], spec(max_cost=5.0), {**PREDICTED, "price_per_gpu_hour": None})
    assert block["decision"] == "no-go" and "no cost to judge" in block["line"]
    # A plan without a cost (made where the dataset could not be counted) takes the job's own.
    priced = {**spec(max_cost=5.0), "hyperparameters": {"price_per_gpu_hour": 3.0}}
    block = judge([rank(0)], priced, {**PREDICTED, "price_per_gpu_hour": None})
    assert block["extrapolated"]["price_per_gpu_hour"] == 3.0 and block["decision"] == "go"


def test_the_watch_judges_once_every_rank_wrote_then_records_logs_and_answers(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"job_id": "j", "status": "running", "predicted": PREDICTED}))
    (tmp_path / "log.txt").write_text("step 3\n")
    watch = CanaryWatch(job, spec(max_cost=0.01), [0, 1])
    rank_file(tmp_path, 0).parent.mkdir()
    rank_file(tmp_path, 0).write_text(json.dumps(rank(0)))
    watch.poll()
    assert read_decision(tmp_path) is None  # rank 1 has not written yet
    rank_file(tmp_path, 1).write_text(json.dumps(rank(1)))
    watch.poll()
    answer = read_decision(tmp_path)
    assert answer is not None and answer["go"] is False
    record = json.loads(job.read_text())
    assert record["canary"]["decision"] == "no-go" and record["status"] == "running"
    log = (tmp_path / "log.txt").read_text().splitlines()
    assert log[1].startswith("canary: 3 steps") and log[-1] == answer["line"]
    outcome_file(tmp_path).write_text(json.dumps({"go": False, "line": answer["line"]}))
    assert watch.stopped()
    assert "canary: no-go: --max-cost" in outcome_line("j", {**record, "status": "cancelled"})


def test_unjudgeable_files_still_answer_no_go(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"job_id": "j", "predicted": PREDICTED}))
    (tmp_path / "log.txt").write_text("")
    rank_file(tmp_path, 0).parent.mkdir()
    rank_file(tmp_path, 0).write_text(json.dumps({"rank": 0, "step_s": "x"}))
    CanaryWatch(job, spec(), [0]).poll()
    answer = read_decision(tmp_path)
    assert answer is not None and answer["go"] is False and "could not judge" in answer["line"]


def test_longest_first_moves_the_longest_rows_to_the_front_and_keeps_a_permutation() -> None:
    lengths = [5, 50, 7, 49, 1, 48, 3, 2]
    order = epoch_order(len(lengths), 42, 0)
    got = longest_first(order, lengths, 3)
    assert sorted(got) == list(range(8))
    assert [lengths[i] for i in got[:3]] == [50, 49, 48]
    rest = [i for i in order if lengths[i] < 48]
    assert got[3:] == rest


def _args(**kw: object) -> argparse.Namespace:
    base = {"canary": None, "max_cost": None, "max_hours": None, "headroom": None}
    return argparse.Namespace(**{**base, **kw})


def test_command_line_limits() -> None:
    assert canary_of(_args()) is None
    assert canary_of(_args(canary=3, max_cost=0.01)) == {"steps": 3, "max_cost": 0.01}
    for bad, key in (({"max_cost": 1.0}, "canary"), ({"canary": 0}, "canary"),
                     ({"canary": 2, "max_hours": -1.0}, "max_hours"),
                     ({"canary": 2, "headroom": 1.5}, "headroom")):  # fmt: skip
        with pytest.raises(VeriError) as err:
            canary_of(_args(**bad))
        assert key in str(err.value)
