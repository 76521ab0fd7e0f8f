"""Cancelling a job over SSH: through its live supervisor, and after the supervisor was killed
(the fallback that ends torchrun and the ranks with the uploaded trainer code).

The 'remote' is this machine through the test sshd, so the job's processes are visible here
and checked with the same pid-file and /proc search the cancel uses.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from ssh_helpers import cli

from veri_tui.jobfolder.contract.procs import pid_alive, read_pid
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobs import launch
from veri_tui.launch.jobs import target_for as target_for_job
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

# The job-side helpers (the same process search the local cancel tests use).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _running_job(alias: str) -> tuple[str, Path, list[int]]:
    """A 2-rank job over SSH that runs far longer than the test, once it logs a metric."""
    job = load_job_config(
        None,
        model=str(bundled_tiny_model()),
        gpu_count=2,
        sets=["max_steps=100000", "max_seq_length=64"],
    )
    job_id = launch(job, None, host=alias)
    target = target_for_job(job_id)
    assert target is not None
    record = JobHandle(target).get_job()
    job_dir = Path(record["spec"]["output_dir"]).parent
    log = job_dir / "log.txt"
    wait_for(
        lambda: log.is_file() and '{"step"' in log.read_text(errors="replace"),
        120,
        "the first metric line",
    )
    ranks = [read_pid(p) for p in (job_dir / "pids").glob("rank-*")]
    assert len(ranks) == 2 and all(p and pid_alive(p) for p in ranks)
    target.close()
    return job_id, job_dir, [p for p in ranks if p]


def test_cancel_over_ssh_ends_every_rank(ssh_env) -> None:
    job_id, job_dir, ranks = _running_job(ssh_env.alias)
    t0 = time.monotonic()
    out = cli("cancel", job_id)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert f"job {job_id} cancelled" in out.stdout
    # The local bound is 10 s; over SSH a fresh process also connects (well under a second
    # to 127.0.0.1) and polls job.json over SFTP.
    assert took < 15, took
    print(f"cancel over SSH (fresh process, live supervisor): {took:.2f} s")
    assert '"status": "cancelled"' in (job_dir / "job.json").read_text()
    assert not leftover_pids(job_dir) and not any(pid_alive(p) for p in ranks)


def test_cancel_over_ssh_after_the_supervisor_was_killed(ssh_env) -> None:
    job_id, job_dir, ranks = _running_job(ssh_env.alias)
    supervisor = read_pid(job_dir / "supervisor.pid")
    assert supervisor and pid_alive(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not pid_alive(supervisor), 10, "the supervisor to die")
    time.sleep(1)
    assert all(pid_alive(p) for p in ranks)  # torchrun and the ranks outlive it
    # Listed meanwhile: lost, since no supervisor is left to record an outcome.
    listed = cli("jobs", "--json")
    assert listed.returncode == 0 and job_id in listed.stdout
    t0 = time.monotonic()
    out = cli("cancel", job_id)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert f"job {job_id} cancelled" in out.stdout  # not "had already ended": it was lost
    print(f"cancel over SSH (fresh process, supervisor killed): {took:.2f} s")
    wait_for(lambda: not leftover_pids(job_dir), 10, "every process of the job to end")
    assert not any(pid_alive(p) for p in ranks)
    assert '"status": "cancelled"' in (job_dir / "job.json").read_text()
