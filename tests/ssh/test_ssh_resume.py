"""Resume over SSH: a remote job whose rank 1 was SIGKILLed is resumed in its remote folder by
`veri-tui resume JOB --gpu-count 1 --wait` (re-planned after the host's preflight, the
uploaded trainer's prepare_resume, then its supervisor started again over the real test sshd)
and ends succeeded from its newest verified checkpoint; a gpu_count that cannot split the
batch is refused first, changing nothing.

The 'remote' is this machine through the test sshd, so the remote job folder and its
processes are visible here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from ssh_helpers import cli

from veri_tui.jobfolder.contract.procs import read_pid
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobs import launch
from veri_tui.launch.jobs import target_for as target_for_job
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.trial, pytest.mark.timeout(240)]
STEPS = 30


def test_remote_job_killed_then_resumed_over_ssh(ssh_env) -> None:
    job = load_job_config(
        None,
        model=str(bundled_tiny_model()),
        gpu_count=2,
        sets=[f"max_steps={STEPS}", "checkpoint_steps=10", "max_seq_length=64"],
    )
    job_id = launch(job, None, host=ssh_env.alias)
    target = target_for_job(job_id)
    assert target is not None
    job_dir = Path(JobHandle(target).get_job()["spec"]["output_dir"]).parent
    target.close()
    wait_for(lambda: (job_dir / "checkpoints" / "step-10").is_dir(), 120, "step-10 committed")
    rank1 = read_pid(job_dir / "pids" / "rank-1")
    assert rank1
    os.kill(rank1, signal.SIGKILL)
    record = wait_for(
        lambda: has_ended(r := json.loads((job_dir / "job.json").read_text())) and r,
        60,
        "the job to fail",
    )
    assert record["status"] == "failed" and record["error"]["code"] == "RANK_LOST", record
    first_pid = read_pid(job_dir / "supervisor.pid")

    before = (job_dir / "job.json").read_text()
    refused = cli("resume", job_id, "--gpu-count", "3")
    assert refused.returncode == 2 and refused.stderr.startswith("error: gpu_count: 3 GPUs ")
    assert (job_dir / "job.json").read_text() == before  # nothing changed on the host

    # Re-planned on the host (its preflight) for 1 GPU, the global batch kept.
    out = cli("resume", job_id, "--gpu-count", "1", "--wait", timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"job {job_id} resumed: attempt 2"
    rec = json.loads((job_dir / "job.json").read_text())
    assert rec["status"] == "succeeded" and rec["error"] is None
    assert rec["spec"]["gpu_count"] == 1 and rec["resolved_parallelism"]["global_batch_size"] == 2
    assert any(ln.startswith("plan: dp=1 ") for ln in out.stdout.splitlines())
    assert [(a["attempt"], a["status"]) for a in rec["attempts"]] == [
        (1, "failed"),
        (2, "succeeded"),
    ]
    step = rec["attempts"][1]["resumed_from_step"]
    assert step is not None and step >= 10
    assert f"resume: attempt 2 from step-{step} (verified)" in out.stdout
    assert read_pid(job_dir / "supervisor.pid") != first_pid  # a new supervisor ran it
    steps = [json.loads(ln)["step"] for ln in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
    assert (job_dir / "attempts" / "1" / "torchrun.log").is_file()
    # The registry saw the outcome; a second resume is refused with the reason.
    listed = json.loads(cli("jobs", "--json").stdout)
    assert [r["status"] for r in listed if r["job_id"] == job_id] == ["succeeded"]
    again = cli("resume", job_id)
    assert again.returncode == 2
    assert again.stderr.startswith(f"error: job: {job_id} already succeeded")
    wait_for(lambda: not leftover_pids(job_dir), 30, "the supervisor to exit")
