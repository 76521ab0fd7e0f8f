"""Fixtures for the job-side tests: a private VERI_HOME, the torch-free stand-in rank, and
helpers that wait for a job and look for any process it left behind (through /proc)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.supervise import job_processes, now_iso, pid_alive, read_pid
from veri_tui.launch.local import LocalTarget

STANDIN_DIR = Path(__file__).parent / "standin"
PLAN_LINE = (
    "plan: dp=2 zero_stage=0 tp=1 cp=1 mbs=1 grad_acc=1 gbs=2 precision=bf16 "
    "gradient_checkpointing=on (auto: 0.0 GB states/GPU)"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh $VERI_HOME for the test (the launch side reads it on every call); any process
    a job left behind is killed afterwards so one failing test cannot slow the next."""
    path = tmp_path / "veri-home"
    monkeypatch.setenv("VERI_HOME", str(path))
    yield path
    for job_dir in (path / "jobs").glob("*"):
        for pid in leftover_pids(job_dir):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def standin(home: Path, monkeypatch: pytest.MonkeyPatch) -> LocalTarget:
    """A local target whose supervisor runs the stand-in rank instead of the trainer."""
    monkeypatch.setenv("VERI_TRAINER_MODULE", "veri_standin")
    path = os.pathsep.join(p for p in (str(STANDIN_DIR), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    return LocalTarget()


def standin_record(job_id: str, job_dir: Path, steps: int = 3, gpu_count: int = 2) -> dict:
    """A job.json record as veri_tui.launch.spec builds it, for the stand-in rank."""
    spec = {
        "method": "sft_text",
        "model": "tiny",
        "model_path": str(job_dir),
        "dataset": "/dev/null",
        "output_dir": str(job_dir / "output"),
        "gpu": "L4-24GB",
        "gpu_count": gpu_count,
        "nproc_per_node": gpu_count,
        "device": "auto",
        "hyperparameters": {"max_steps": steps},
        "resolved_parallelism": {"data_parallel_size": gpu_count, "zero_stage": 0},
        "plan_header": ["model: tiny", "budget: 15.3 GB/GPU", PLAN_LINE],
        "states_bytes_per_gpu": 0,
    }
    return {
        "job_id": job_id,
        "status": "pending",
        "created_at": now_iso(),
        "started_at": None,
        "ended_at": None,
        "host": None,
        "spec": spec,
        "resolved_parallelism": spec["resolved_parallelism"],
        "error": None,
    }


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def leftover_pids(job_dir: Path) -> list[int]:
    """Every live process of the job: supervisor, torchrun, ranks (by pid file and /proc)."""
    pids = job_processes(job_dir / "job.json")
    sup = read_pid(job_dir / "supervisor.pid")
    return pids + ([sup] if sup and pid_alive(sup) else [])


def wait_ended(target: LocalTarget, job_id: str, timeout: float = 60) -> dict:
    """The job's record once it has ended."""
    terminal = ("succeeded", "failed", "cancelled")
    return wait_for(
        lambda: (r := target.get_job(job_id))["status"] in terminal and r, timeout, "job end"
    )
