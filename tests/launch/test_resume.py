"""`veri-tui resume`: a new attempt in the same job folder from the newest verified checkpoint.

Real torchrun, 2 CPU ranks, the tiny model, 60 steps, a checkpoint every 10. Rank 1 is
SIGKILLed from outside once step-20 is committed; step-20 is then damaged (one byte, same
size: only the manifest's sha256 catches it) and a partial `step-30.tmp` planted. The resume
skips step-20 by name, removes the partial folder, starts from step-10, reuses the token
cache the first attempt built (no tokenization: the log says so), and ends with the
uninterrupted run's losses; a copy of the failed folder, one byte of its token cache flipped,
resumed on 1 GPU (same global batch, grad_acc 2), tokenizes again (the damaged cache is not
trusted) and ends within 2% of it. Refusals need no torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch_helpers import cli, leftover_pids, wait_for
from resume_helpers import STEPS, killed_job, metrics, reference_run  # noqa: F401

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.attempts import prepare_resume
from veri_tui.jobfolder.contract.layout import SUPERVISOR_PID
from veri_tui.jobfolder.contract.procs import write_pid
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.launch.replan import split_batch
from veri_tui.launch.spec import build_record
from veri_tui.plan import load_job_config, plan_job


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict, str, Path, str]]:
    """(env, id, folder) of the killed job, and the id of a copy of its folder."""
    home = tmp_path_factory.mktemp("resume-home")
    env = dict(os.environ, VERI_HOME=str(home))
    job_id, job_dir = killed_job(home, after="step-20", env=env)
    copy_id = job_id[:-4] + "c0de"
    shutil.copytree(job_dir, home / "jobs" / copy_id)
    record = read_job(home / "jobs" / copy_id / "job.json")
    record["job_id"] = copy_id
    record["spec"]["output_dir"] = str(home / "jobs" / copy_id / "output")
    write_json_atomic(home / "jobs" / copy_id / "job.json", record)
    yield env, job_id, job_dir, copy_id
    for folder in (home / "jobs").glob("*"):
        for pid in leftover_pids(folder):
            os.kill(pid, signal.SIGKILL)


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_skips_a_corrupt_step_and_equals_the_uninterrupted_run(
    failed: tuple, reference: list[dict]
) -> None:
    env, job_id, job_dir, _ = failed
    record = read_job(job_dir / "job.json")
    assert record["status"] == "failed" and record["error"]["code"] == "RANK_LOST"
    assert len(record["attempts"]) == 1
    ckpts = job_dir / "checkpoints"
    data = sorted(ckpts.glob("step-20/*.distcp"))[0]
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    (ckpts / "step-30.tmp").mkdir(exist_ok=True)
    (ckpts / "step-30.tmp" / "__0_0.distcp").write_bytes(b"partial")

    out = cli("resume", job_id, "--wait", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == f"job {job_id} resumed: attempt 2"
    assert any(ln.startswith("resume: skipped step-20: ") and data.name in ln for ln in lines)
    assert f"resume: removed the partial write {ckpts / 'step-30.tmp'}" in lines
    assert "resume: attempt 2 from step-10 (verified)" in lines
    assert not (ckpts / "step-30.tmp").exists()
    # The token cache the first attempt built (2 ranks) is checked and reused, not rebuilt.
    tokens = job_dir / "tokens"
    reused = f"data: token cache reused ({tokens}, 64 rows, checked in "
    assert sum(ln.startswith(reused) for ln in lines) == 1
    assert not any(ln.startswith("data: tokenized") for ln in lines)
    history = (job_dir / "log.txt").read_text().splitlines()
    [built] = [ln for ln in history if ln.startswith("data: tokenized")]
    assert built.startswith(f"data: tokenized 64 rows into {tokens} (") and "2 ranks" in built
    [again] = [ln for ln in lines if ln.startswith(reused)]
    print(f"token cache: {built.removeprefix('data: ')}; on resume: {again.removeprefix('data: ')}")

    rec = read_job(job_dir / "job.json")
    assert rec["status"] == "succeeded" and rec["error"] is None and rec["exit_code"] == 0
    first, second = rec["attempts"]
    assert (first["attempt"], first["status"], first["error"]["code"]) == (1, "failed", "RANK_LOST")
    assert first["error"]["attribution"] == "platform" and first["resumed_from_step"] is None
    assert (second["attempt"], second["status"], second["resumed_from_step"]) == (
        2,
        "succeeded",
        10,
    )
    assert second["error"] is None and rec["started_at"] == second["started_at"]
    assert rec["credited_gpu_s"] == round(first["wall_s"] * 2, 1) > 0
    got = metrics(job_dir)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))  # each step once
    print(f"resumed on 2 GPUs: last loss {got[-1]['loss']} vs {reference[-1]['loss']}")
    assert close(got[-1]["loss"], reference[-1]["loss"], 1e-3)
    assert all(close(g["loss"], r["loss"], 1e-3) for g, r in zip(got, reference, strict=True))
    assert (job_dir / "attempts" / "1" / "torchrun.log").is_file()
    wait_for(lambda: not leftover_pids(job_dir), 30, "the supervisor to exit")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_resume_on_one_gpu_keeps_the_global_batch(failed: tuple, reference: list[dict]) -> None:
    env, _, _, copy_id = failed
    copy_dir = Path(env["VERI_HOME"]) / "jobs" / copy_id
    damaged = copy_dir / "tokens" / "part-1.ids"  # one byte: only the manifest's sha256 sees it
    raw = bytearray(damaged.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    damaged.write_bytes(bytes(raw))
    out = cli("resume", copy_id, "--gpu-count", "1", "--wait", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "resume: attempt 2 from step-20 (verified)" in lines
    stale = f"data: token cache not reused: {damaged}: sha256 differs from the manifest "
    assert any(ln.startswith(stale) for ln in lines)
    rebuilt = f"data: tokenized 64 rows into {copy_dir / 'tokens'} ("
    assert any(ln.startswith(rebuilt) and ln.endswith(", 1 rank)") for ln in lines)
    rec = read_job(copy_dir / "job.json")
    assert rec["status"] == "succeeded"
    assert rec["spec"]["gpu_count"] == 1 and rec["attempts"][1]["gpu_count"] == 1
    rp = rec["resolved_parallelism"]
    assert (rp["data_parallel_size"], rp["gradient_accumulation_steps"]) == (1, 2)
    assert rp["global_batch_size"] == 2  # the job's global batch, kept
    assert any(ln.startswith("plan: dp=1 ") for ln in out.stdout.splitlines())
    got = metrics(copy_dir)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))
    rel = got[-1]["loss"] / reference[-1]["loss"] - 1
    print(f"resumed on 1 GPU: last loss {got[-1]['loss']} vs {reference[-1]['loss']} ({rel:+.3%})")
    assert close(got[-1]["loss"], reference[-1]["loss"], 2e-2)


def _job_folder(home: Path, status: str, **fields: object) -> tuple[str, Path]:
    """A job folder holding a real record (planned, paths resolved), with ``status``."""
    job_id = "20260101-000000-ab12"
    job_dir = home / "jobs" / job_id
    job_dir.mkdir(parents=True)
    job = load_job_config(None, gpu_count=2, sets=["max_steps=4"])
    record = build_record(job, plan_job(job), job_id, job_dir)
    write_json_atomic(job_dir / "job.json", {**record, "status": status, **fields})
    return job_id, job_dir


def test_resume_refuses_a_running_and_a_succeeded_job(home: Path) -> None:
    job_id, job_dir = _job_folder(home, "running")
    stand_in = subprocess.Popen(["sleep", "120"])  # stands for a live supervisor
    write_pid(job_dir / SUPERVISOR_PID, stand_in.pid)
    before = (job_dir / "job.json").read_text()
    try:
        out = cli("resume", job_id)
    finally:
        stand_in.kill()
        stand_in.wait()
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: job: {job_id} is running; wait for it to end, or `veri-tui cancel {job_id}` "
        "first\n"
    )
    assert (job_dir / "job.json").read_text() == before
    write_json_atomic(job_dir / "job.json", {**json.loads(before), "status": "succeeded"})
    out = cli("resume", job_id)
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: job: {job_id} already succeeded (its artifact: ")
    assert cli("resume", "20990101-000000-0000").stderr.startswith("error: job: no job ")


def test_a_gpu_count_that_cannot_split_the_batch_is_refused(home: Path) -> None:
    job_id, job_dir = _job_folder(home, "failed", error={"code": "RANK_LOST"})
    before = (job_dir / "job.json").read_text()
    out = cli("resume", job_id, "--gpu-count", "3")
    assert out.returncode == 2
    assert out.stderr.startswith(
        "error: gpu_count: 3 GPUs cannot split the job's global batch of 2 samples"
    )
    assert (job_dir / "job.json").read_text() == before  # nothing changed, nothing started
    assert not (job_dir / SUPERVISOR_PID).exists()
    out = cli("resume", job_id, "--set", "zero_stage=1")
    assert out.returncode == 2 and out.stderr.startswith("error: zero_stage: ")


def test_split_batch() -> None:
    assert split_batch(8, 4, 4) == 2  # mbs kept when it divides each rank's share
    assert split_batch(4, 2, 4) == 1  # lowered to what a rank's share of 1 allows
    assert split_batch(12, 4, 2) == 3  # the largest size below mbs that divides 6
    assert split_batch(2, 1, 1) == 1


def test_resume_of_a_lost_job_ends_its_leftover_ranks_and_closes_its_attempt(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job.json"
    started = time.time() - 30
    attempt = {"attempt": 1, "status": "running", "started_s": started, "gpu_count": 2}
    write_json_atomic(job, {"job_id": "j", "status": "running", "spec": {"gpu_count": 2},
                            "attempts": [attempt]})  # fmt: skip
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_pid(tmp_path / SUPERVISOR_PID, gone.pid)  # its supervisor died
    # A rank it left running: the job.json path on its command line, as torchrun's ranks have.
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(job)])
    # Popen can return (vfork) before the kernel has set the child's command line: until
    # then /proc/<pid>/cmdline reads empty and no scan could find it. A lost job's ranks
    # have long been running; wait for that here.
    cmdline = Path(f"/proc/{rank.pid}/cmdline")
    for _ in range(1000):
        if str(job).encode() in cmdline.read_bytes():
            break
        time.sleep(0.01)
    (tmp_path / "log.txt").write_text("step 7\n")  # the last sign of life: now
    try:
        record = prepare_resume(job)
        assert rank.wait(timeout=10) is not None  # ended by the resume
    finally:
        rank.kill()
    first = record["attempts"][0]
    assert record["status"] == "pending" and record["resumed_at"]
    assert first["status"] == "failed" and first["error"]["code"] == "RANK_LOST"
    assert 29 <= first["wall_s"] <= 300
    assert record["credited_gpu_s"] == round(first["wall_s"] * 2, 1)
    assert not (tmp_path / SUPERVISOR_PID).exists()  # a dead pid would read as lost again
