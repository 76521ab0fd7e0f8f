"""benchmarks/gpu_check.py's CPU mode end to end (2 CPU ranks under the project's
supervisor): a run trains and compares with the plan, a run that overruns its timeout is
ended with every process of its job and the next run still happens, results are rewritten
after each run, SIGTERM to the check leaves nothing of the job behind, and a feature run
fails once and resumes. One check per module (`cpu_check`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import gpu_check
import pytest
from test_gpu_check_imports import ABSENT

SCRIPT = Path(gpu_check.__file__)


def _job_processes(root: Path) -> list[int]:
    """Live pids whose command line names a path under `root` (the check's jobs)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace")
                state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            except OSError:
                continue
            if str(root) in cmd and state not in ("Z", "X"):
                found.append(int(d))
    return found


def _prepare_cpu(folder: Path, steps: int, gc: str) -> None:
    args = [str(folder), "--prepare", "--device", "cpu", "--shapes", "tiny", "--seq", "64"]
    assert (
        gpu_check.main([*args, "--steps", str(steps), "--mbs", "1", "--gc", gc, "--gpu", "L4-24GB"])
        == 0
    )


@pytest.fixture(scope="module")
def cpu_check(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One CPU-mode check (tiny shape, 2 CPU ranks, 5 steps); its work folder keeps the
    built model for the other tests."""
    root = tmp_path_factory.mktemp("gpu-check")
    _prepare_cpu(root / "prep", steps=5, gc="off")
    rc = gpu_check.main(
        [str(root / "prep"), "--out", str(root / "out"), "--work", str(root / "work")]
    )
    return {"root": root, "rc": rc}


@pytest.mark.slow
def test_cpu_mode_trains_and_compares_with_the_plan(cpu_check: dict) -> None:
    root = cpu_check["root"]
    assert cpu_check["rc"] == 0
    result = json.loads((root / "out" / "gpu_check.json").read_text())
    (row,) = result["runs"]
    assert (result["device"], result["planned_for"]) == ("cpu", "L4-24GB")
    assert result["verdict"]["line"] == "gpu_check: 1 passed, 0 not judged, 0 failed: exit 0"
    # The attention-kernel probe (gpu_check_kernels.py) ran the tiny model's step: on CPU,
    # SDPA's own flash kernel, forward and backward.
    ops = result["kernels"]["tiny"]
    assert {
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
    } <= set(ops), ops
    assert "attention kernels: tiny: flash" in (root / "out" / "gpu_check.log").read_text()
    # $OUT as a lent GPU machine gives it back: four files, every run's logs in one archive.
    assert sorted(p.name for p in (root / "out").iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
        "gpu_check_runs.tar.gz",
    ]
    with tarfile.open(root / "out" / "gpu_check_runs.tar.gz") as tar:
        assert "runs/tiny-mbs1-nogc/log.txt" in tar.getnames()
    assert row["status"] == "succeeded" and row["steps_done"] == 5 and row["left_running"] == []
    # The trainer's measured states against the plan (AdamW's step scalars aside).
    assert abs(row["states_measured"]["total"] / row["states_bytes"] - 1) < 0.001
    assert row["measured_tokens_per_s_per_gpu"] > 0 and row["tokens_ratio"] > 0
    table = (root / "out" / "gpu_check.md").read_text()
    assert "| tiny-mbs1-nogc |" in table and "succeeded" in table
    assert not (root / "work" / "jobs" / "tiny-mbs1-nogc" / "output").exists()


@pytest.mark.slow
@pytest.mark.trial  # docs/trials.md
def test_overrunning_runs_are_ended_whole_and_the_next_still_runs(cpu_check: dict) -> None:
    root = cpu_check["root"]
    _prepare_cpu(root / "prep-long", steps=100_000, gc="on,off")  # cannot finish in 3 s
    out = root / "out-long"
    rc = gpu_check.main([str(root / "prep-long"), "--out", str(out), "--work", str(root / "work"),
                         "--budget-s", "60", "--floor-s", "3", "--cap-s", "3"])  # fmt: skip
    assert rc == 1
    rows = json.loads((out / "gpu_check.json").read_text())["runs"]
    assert [r["status"] for r in rows] == ["timeout", "timeout"]  # the second run still ran
    for r in rows:
        assert r["timeout_s"] == 3.0 and r["left_running"] == []
        record = json.loads((root / "work" / "jobs" / r["name"] / "job.json").read_text())
        assert record["status"] == "cancelled"  # the supervisor's own cancel ended the ranks
    assert _job_processes(root / "work") == []
    table = (out / "gpu_check.md").read_text()
    assert table.count("| timeout |") == 2


@pytest.mark.slow
@pytest.mark.trial  # docs/trials.md
def test_sigterm_to_the_check_ends_the_running_job(cpu_check: dict) -> None:
    """What the shell wrapper's outer `timeout` does: TERM mid-run leaves no rank behind.
    The check and its model build run as on the GPU image: without veri-tui, pydantic,
    textual or paramiko (test_gpu_check_imports.ABSENT)."""
    root = cpu_check["root"]
    _prepare_cpu(root / "prep-term", steps=100_000, gc="on")
    work = root / "work-term"  # its own: the timeouts test leaves pid files in "work"
    (root / "absent").mkdir(exist_ok=True)
    (root / "absent" / "sitecustomize.py").write_text(ABSENT)
    env = {**os.environ, "PYTHONPATH": f"{root / 'absent'}{os.pathsep}{SCRIPT.parents[1]}"}
    cmd = [sys.executable, str(SCRIPT), str(root / "prep-term"), "--work", str(work)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rank0 = work / "jobs" / "tiny-mbs1-gc" / "pids" / "rank-1"
    deadline = time.monotonic() + 120
    while not rank0.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert rank0.exists(), proc.stderr.read() if proc.poll() is not None else "no rank started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 124
    assert _job_processes(work) == []


@pytest.mark.slow
@pytest.mark.trial  # docs/trials.md
def test_cpu_mode_feature_run_fails_once_then_resumes(cpu_check: dict) -> None:
    """The checkpoint-and-resume feature run end to end on 2 CPU ranks (tiny stand-ins):
    attempt 1 saves step 3 and fails at step 5 (injected), the supervisor's resume runs
    attempt 2 from step-3; the logs and failure records of both come back in --out."""
    root = cpu_check["root"]
    args = [
        str(root / "prep-feat"),
        "--prepare",
        "--device",
        "cpu",
        "--shapes",
        "",
        "--features",
        "lora-dpo-selective-resume",
        "--feature-shape",
        "tiny",
        "--feature-seq",
        "64",
        "--gpu",
        "L4-24GB",
        "--wheel",
        str(root / "none.whl"),
    ]
    with zipfile.ZipFile(root / "none.whl", "w") as zf:  # an empty wheel: nothing to import
        zf.writestr("none/__init__.py", "")
    assert gpu_check.main(args) == 0
    out = root / "out-feat"
    rc = gpu_check.main([str(root / "prep-feat"), "--out", str(out), "--work", str(root / "work")])
    (row,) = json.loads((out / "gpu_check.json").read_text())["runs"]
    assert rc == 0 and row["status"] == "succeeded", row
    assert row["first_attempt"]["status"] == "failed"
    assert [a["resumed_from_step"] for a in row["attempts"]] == [None, 3]
    assert row["steps_done"] == 6 and row["left_running"] == []
    kept = set(row["files"])
    assert {
        "runs/lora-dpo-selective-resume/log.txt",
        "runs/lora-dpo-selective-resume/torchrun.log",
        "runs/lora-dpo-selective-resume/attempts/1/failures/rank-0.json",
    } <= kept, kept
    with tarfile.open(out / "gpu_check_runs.tar.gz") as tar:
        assert set(row["files"]) <= set(tar.getnames())
        log = tar.extractfile("runs/lora-dpo-selective-resume/log.txt")
        assert log is not None and b"resume: from checkpoint step-3" in log.read()
