"""The job side end to end: `veri-tui launch` runs the real trainer under real torchrun with
2 CPU processes (gloo); failures come from real ranks (VERI_FAULT injects only what CUDA would
raise, see docs/trainer.md); cancel and detach are checked against /proc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import leftover_pids, wait_ended, wait_for
from trainer.trainer_jobs import failure

from veri_tui.bundled import assets_dir
from veri_tui.jobfolder.contract.procs import pid_alive, read_pid
from veri_tui.launch import jobs
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.metrics import log_row
from veri_tui.plan import load_job_config, plan_job

ASSETS = assets_dir()

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]
TINY = ASSETS / "tiny-model"


def cli(*args: str, timeout: float = 80, **kw) -> subprocess.CompletedProcess[str]:
    """`veri-tui ARGS` in a fresh process (the environment carries VERI_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kw,
    )


def failed_error(home: Path, out: subprocess.CompletedProcess[str]) -> dict:
    """The error of the job a `launch --wait` run reported as failed (exit 1)."""
    assert out.returncode == 1, out.stderr
    job_id = out.stdout.splitlines()[0]
    rec = json.loads((home / "jobs" / job_id / "job.json").read_text())
    assert rec["status"] == "failed"
    err = rec["error"]
    # The last stderr line carries job.json's code and attribution, then its summary (a
    # data error's is the log's last line, not said again).
    last = out.stderr.splitlines()[-1]
    head = f"job {job_id} failed: {err['code']} ({err['attribution']})"
    assert last == head + (
        f": {err['summary']}"
        if err["code"] != "DATA_ERROR"
        else " (the line above; traceback in the job folder's traceback.txt)"
    )
    return err


def test_launch_wait_succeeds_and_logs_plan_then_metrics(home: Path) -> None:
    out = cli("launch", "--gpu-count", "2", "--set", "max_steps=3", "--wait")
    assert out.returncode == 0, out.stderr
    # Said before it starts: where the ranks run against the plan's GPUs (issue 35).
    assert out.stderr.splitlines()[0] == (
        "warning: no CUDA GPU on this machine: the job runs 2 CPU processes (gloo) instead of "
        "the planned 2 x L4-24GB; the plan's memory, speed and cost figures are for those GPUs"
    )
    job_id, *followed = out.stdout.splitlines()
    job_dir = home / "jobs" / job_id
    rec = json.loads((job_dir / "job.json").read_text())
    assert rec["status"] == "succeeded" and rec["error"] is None
    # Measured after every run (veri_tui/trainer/runstats.py), beside the plan's figures.
    measured, predicted = rec["measured"], rec["predicted"]
    assert (measured["ranks"], measured["gpu"], measured["final"]) == (2, "cpu", True)
    for states in measured["states_bytes_per_rank"]:  # AdamW's step scalars aside
        assert states == pytest.approx(rec["spec"]["states_bytes_per_gpu"], rel=0.001)
    assert measured["peak_bytes"] > measured["states_bytes"] and measured["tokens_per_s"] > 0
    assert (measured["steps_timed"], measured["warmup_steps"]) == (1, 2)
    assert predicted["states_bytes"] == rec["spec"]["states_bytes_per_gpu"]
    assert predicted["tokens_per_s"] > 0 and predicted["peak_bytes"] > predicted["states_bytes"]
    # `launch --wait` read the finished job: it is folded, as a CPU run, into the calibration.
    calibration = json.loads((home / "calibration.json").read_text())
    assert calibration["folded"] == [job_id] and list(calibration["entries"]) == ["cpu@local"]
    assert "measured on cpu x2, planned for L4-24GB" in cli("jobs", job_id).stdout
    plan = plan_job(load_job_config(None, gpu_count=2, sets=["max_steps=3"]))
    header = [*plan.header_lines, plan.plan_line]  # then the plan's warnings, if any
    log = (job_dir / "log.txt").read_text().splitlines()
    assert log[: len(plan.lines())] == plan.lines() and log[len(header) - 1].startswith(
        "plan: dp=2"
    )
    metrics = [json.loads(ln) for ln in log if ln.startswith('{"step"')]
    assert [(m["step"], m["total_steps"]) for m in metrics] == [(1, 3), (2, 3), (3, 3)]
    assert log.index(next(ln for ln in log if ln.startswith('{"step"'))) > len(header) - 1
    # --wait printed the rank-0 log, every line once, each metric line as the app's row.
    rows = [
        f"step {m['step']}/3  loss {m['loss']:.4g}  lr {m['learning_rate']:.1e}  "
        f"grad {m['grad_norm']:.3g}  {m['tokens_per_s']:,.0f} tok/s  mem "
        for m in metrics
    ]
    assert followed == [log_row(ln) for ln in log] and not any('{"step' in ln for ln in followed)
    shown = [ln for ln in followed if ln.startswith("step ")]
    assert [ln[: len(row)] for ln, row in zip(shown, rows, strict=True)] == rows
    # Set-up time (veri_tui/trainer/runstats.py SetupClock): one rank-0 line, the same figures in
    # job.json.
    setup = measured["setup_s"]
    assert sorted(setup) == ["data", "first_step", "model", "shard"]
    assert all(v >= 0 for v in setup.values()) and setup["model"] > 0
    [line] = [ln for ln in log if ln.startswith("setup: ")]
    names = ("model", "shard", "data", "first step")
    shown = dict(p.rsplit(" ", 2)[:2] for p in line.removeprefix("setup: ").split(", "))
    assert tuple(shown) == names and line.endswith(" s")
    for name, value in shown.items():  # the line has 1 decimal, the record 3
        assert float(value) == pytest.approx(setup[name.replace(" ", "_")], abs=0.051)
    assert (Path(rec["spec"]["output_dir"]) / "config.json").is_file()
    # The other commands read the same folder from a fresh process.
    assert cli("logs", job_id).stdout.splitlines() == followed
    assert cli("logs", job_id, "-f").stdout.splitlines() == followed
    assert cli("logs", job_id, "--json").stdout.splitlines() == log  # as the trainer wrote it
    listed = json.loads(cli("jobs", "--json").stdout)
    assert [(r["job_id"], r["status"]) for r in listed] == [(job_id, "succeeded")]
    assert "already ended: succeeded" in cli("cancel", job_id).stdout


def test_malformed_data_row_is_refused_before_the_launch(home: Path, tmp_path: Path) -> None:
    rows = (ASSETS / "data" / "sft.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows[:6] + ['{"text": "unterminated'] + rows[6:]) + "\n")
    out = cli("launch", "--gpu-count", "2", "--dataset", str(bad), "--wait")
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith(f"error: dataset: {bad} line 7: not valid JSON")
    assert not (home / "jobs").exists()  # nothing started (issue 27)


def test_a_data_error_in_a_run_is_one_line_naming_file_and_line(home: Path, tmp_path: Path) -> None:
    # A row the preflight never saw (it refuses one with nothing to train on): written once
    # the job started (its id printed), read by the ranks seconds later, after torch's
    # imports. Its prompt alone fills max_seq_length.
    rows = [{"prompt": "hi", "completion": " yes"}] * 5
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["--dataset", str(data), "--set", "max_seq_length=16", "--set", "max_steps=2"]
    argv += ["--set", "max_restarts=3"]  # the customer's failure is never retried
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", "launch", "--gpu-count", "2", *argv, "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the job id: started
    rows[4] = {"prompt": "long " * 40, "completion": "x"}
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rest, stderr = proc.communicate(timeout=120)
    out = subprocess.CompletedProcess(proc.args, proc.returncode, first + rest, stderr)
    err = failed_error(home, out)
    assert (err["code"], err["attribution"]) == ("DATA_ERROR", "customer")
    rank = f"rank {err['rank']}/2 (node 0, local_rank {err['rank']}) failed: DataError: "
    what = f"{data} line 5: no tokens left to train on within max_seq_length=16"
    # The log ends with one line saying it; the outcome line adds the code, not the text again.
    assert out.stdout.splitlines()[-1] == rank + what
    assert out.stdout.count(what) == 1 and "Traceback" not in out.stdout
    [job_dir] = (home / "jobs").iterdir()
    assert "Traceback (most recent call last)" in (job_dir / "traceback.txt").read_text()
    rec = json.loads((job_dir / "job.json").read_text())
    assert [a["status"] for a in rec["attempts"]] == ["failed"]  # not retried ...
    assert rec["credited_gpu_s"] == 0  # ... nor credited
    assert "retry:" not in (job_dir / "log.txt").read_text()


def test_missing_model_file_is_model_load_error(home: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(TINY, model)
    job = load_job_config(
        None,
        model=str(model),
        gpu_count=2,
        sets=["max_steps=2"],
        dataset=str(BUNDLED_DATASETS["sft_text"]),
    )
    record = plan_job(job)  # planned from the headers while the weights were there
    (model / "model.safetensors").unlink()
    job_id = jobs.launch(job, record, wait=True)
    err = jobs.get_job(job_id)["error"]
    assert (err["code"], err["attribution"]) == ("MODEL_LOAD_ERROR", "customer")
    assert err["rank"] in (0, 1)
    for rank in (0, 1):  # each rank met the missing file itself and left its own record
        rec = failure(home / "jobs" / job_id, rank)
        assert rec is not None, f"rank {rank} left no failure record"
        assert rec["code"] == "MODEL_LOAD_ERROR" and rec["rank"] == rank
        assert str(model) in rec["message"] and "model.safetensors" in rec["message"]


def test_oom_on_rank_1_is_blamed_not_its_peer(home: Path, monkeypatch) -> None:
    # FSDP2 (zero_stage=3): rank 0 is inside a collective with the rank that raised.
    monkeypatch.setenv("VERI_FAULT", "oom:1:2")
    sets = ["--set", "max_steps=4", "--set", "zero_stage=3"]
    out = cli("launch", "--gpu-count", "2", *sets, "--wait")
    err = failed_error(home, out)
    assert (err["code"], err["attribution"], err["rank"]) == ("CUDA_OOM", "customer", 1)
    assert err["summary"].startswith(
        "rank 1/2 (node 0, local_rank 1) failed: OutOfMemoryError: CUDA out of memory."
    )
    job_dir = home / "jobs" / out.stdout.splitlines()[0]
    log = (job_dir / "log.txt").read_text()
    assert "rank 0/2" not in log and "OutOfMemoryError" in log.split(err["summary"])[1]
    # The ranks' own records: rank 1 raised it; its peer, when SIGTERM did not end it first,
    # is marked a peer failure, later.
    rec = failure(job_dir, 1)
    assert rec is not None and rec["code"] == "CUDA_OOM" and rec["type"] == "OutOfMemoryError"
    assert rec["message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not rec["peer_failure"]
    peer = failure(job_dir, 0)
    if peer is not None:
        assert peer["peer_failure"] and peer["code"] == "COMM_ERROR"
        assert peer["time_ns"] > rec["time_ns"]


def test_detached_job_survives_its_launcher_and_sighup(home: Path) -> None:
    # The launcher runs in its own session, like a terminal; it exits, then its session
    # gets the SIGHUP a closing terminal sends.
    launcher = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", "launch", "--gpu-count", "2", "--set", "max_steps=3"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    job_id = launcher.communicate(timeout=60)[0].strip()
    assert launcher.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.killpg(launcher.pid, signal.SIGHUP)  # the launcher's whole session is gone ...
    rec = wait_ended(job_id, timeout=80)
    assert rec["status"] == "succeeded"  # ... and the job ran on in its own
    # The supervisor's last act is writing that status; under load its interpreter may
    # still be exiting when the test reads it, so give every process a moment to be gone.
    wait_for(lambda: not leftover_pids(home / "jobs" / job_id), 10, "the job's processes to exit")


def _running_job(home: Path) -> tuple[str, Path, list[int]]:
    out = cli("launch", "--gpu-count", "2", "--set", "max_steps=100000")
    job_id = out.stdout.strip()  # stdout is the id alone; stderr says how to go on
    assert out.stderr.splitlines() == [
        "warning: no CUDA GPU on this machine: the job runs 2 CPU processes (gloo) instead of "
        "the planned 2 x L4-24GB; the plan's memory, speed and cost figures are for those GPUs",
        f"job {job_id} started detached; it runs on without this terminal:",
        f"  follow it:  veri-tui logs {job_id} -f",
        f"  cancel it:  veri-tui cancel {job_id}",
        f"  see it:     veri-tui jobs {job_id}   (or all jobs: veri-tui jobs; the app: veri-tui)",
    ]
    job_dir = home / "jobs" / job_id
    wait_for(
        lambda: (
            '{"step"' in (job_dir / "log.txt").read_text()
            if (job_dir / "log.txt").exists()
            else False
        ),
        60,
        "the first metric line",
    )
    ranks = [read_pid(p) for p in (job_dir / "pids").glob("rank-*")]
    assert len(ranks) == 2 and all(pid_alive(p) for p in ranks)
    return job_id, job_dir, ranks


def test_cancel_ends_every_rank_within_10s(home: Path) -> None:
    job_id, job_dir, ranks = _running_job(home)
    t0 = time.monotonic()
    out = cli("cancel", job_id)
    assert out.returncode == 0 and f"job {job_id} cancelled" in out.stdout
    assert time.monotonic() - t0 < 10  # the contract's bound (issue 4)
    assert json.loads((job_dir / "job.json").read_text())["status"] == "cancelled"
    assert (job_dir / "log.txt").read_text().endswith("\njob cancelled: every rank ended\n")
    assert not leftover_pids(job_dir) and not any(pid_alive(p) for p in ranks)


def test_cancel_after_torchrun_was_sigkilled(home: Path) -> None:
    job_id, job_dir, ranks = _running_job(home)
    os.kill(read_pid(job_dir / "torchrun.pid"), signal.SIGKILL)
    time.sleep(1)
    assert all(pid_alive(p) for p in ranks)  # workers live on in their own sessions
    t0 = time.monotonic()
    assert cli("cancel", job_id).returncode == 0
    assert time.monotonic() - t0 < 10
    assert jobs.get_job(job_id)["status"] == "cancelled"
    assert not leftover_pids(job_dir) and not any(pid_alive(p) for p in ranks)
