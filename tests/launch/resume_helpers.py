"""Helpers for the resume and retry tests: an uninterrupted reference run shared by the test
modules (one per session, across xdist workers: support/session.py), and a job whose rank 1
is SIGKILLed from outside once a checkpoint is committed.

Every job here is the bundled tiny model on 2 CPU ranks, 60 steps, a checkpoint every 10.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from launch_helpers import cli, wait_for
from support.session import once_per_session

from veri_tui.jobfolder.contract.procs import read_pid
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.jobfolder.contract.status import has_ended

STEPS = 60
JOB = ["--gpu-count", "2", "--set", f"max_steps={STEPS}", "--set", "checkpoint_steps=10"]


def metrics(job_dir: Path) -> list[dict]:
    """metrics.jsonl of a job, parsed."""
    return [json.loads(ln) for ln in (job_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session", name="reference")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The metric lines of an uninterrupted run of the job (its own VERI_HOME): one run for
    the whole session, whichever workers the resume and retry modules run on."""

    def run() -> list[dict]:
        home = tmp_path_factory.mktemp("reference-home")
        out = cli("launch", *JOB, "--wait", env=dict(os.environ, VERI_HOME=str(home)))
        assert out.returncode == 0, out.stderr[-3000:]
        got = metrics(home / "jobs" / out.stdout.splitlines()[0])
        assert [m["step"] for m in got] == list(range(1, STEPS + 1))
        return got

    return once_per_session(tmp_path_factory, "resume-reference", run)


def killed_job(
    home: Path, *extra: str, after: str = "step-10", env: dict[str, str] | None = None
) -> tuple[str, Path]:
    """Launch the job, SIGKILL its rank 1 from outside once checkpoints/``after`` is
    committed; returns (job id, job folder) once the kill has ended the attempt (the job
    has failed, or with retries, the next attempt has begun)."""
    out = cli("launch", *JOB, *extra, env=env)
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.split()[0]
    job_dir = home / "jobs" / job_id
    wait_for(lambda: (job_dir / "checkpoints" / after).is_dir(), 120, f"{after} committed")
    pid = read_pid(job_dir / "pids" / "rank-1")
    assert pid
    os.kill(pid, signal.SIGKILL)

    def attempt_ended() -> bool:
        record = read_job(job_dir / "job.json")
        return has_ended(record) or len(record.get("attempts") or []) > 1

    wait_for(attempt_ended, 60, "the killed attempt to end")
    return job_id, job_dir
