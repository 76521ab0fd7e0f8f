"""The hang watchdog on a job launched over SSH: the supervisor on the host ends a job whose
rank 1 was SIGSTOPped from outside and records RANK_HUNG, which the client reads back.

The 'remote' is this machine through the test sshd, so the job's processes are visible here
(the same pid-file and /proc search the cancel uses checks that none is left).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobs import launch
from veri_tui.launch.jobs import target_for as target_for_job
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_sigstopped_rank_over_ssh_is_rank_hung(ssh_env) -> None:
    job = load_job_config(
        None,
        model=str(bundled_tiny_model()),
        gpu_count=2,
        sets=["max_steps=100000", "max_seq_length=64", "hang_timeout_s=15"],
    )
    job_id = launch(job, None, host=ssh_env.alias)
    target = target_for_job(job_id)
    assert target is not None
    job_dir = Path(JobHandle(target).get_job()["spec"]["output_dir"]).parent
    metrics = job_dir / "metrics.jsonl"

    def step() -> int:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        return json.loads(lines[-1])["step"] if lines else 0

    wait_for(lambda: step() >= 5, 150, "step 5 in the remote metrics.jsonl")
    pid = int((job_dir / "pids" / "rank-1").read_text())
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    record = JobHandle(target).wait()
    print(f"over SSH: RANK_HUNG seen {time.monotonic() - stopped:.1f} s after the SIGSTOP")
    target.close()
    err = record["error"]
    assert record["status"] == "failed"
    assert (err["code"], err["attribution"], err["rank"]) == ("RANK_HUNG", "platform", 1)
    assert err["summary"].startswith(
        "rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step "
    )
    # The remote supervisor asked the ranks for their dumps first (docs/jobs.md, Hang forensics)
    # and read the stopped rank's stack from its process.
    print(err["summary"])
    assert ", which rank 0 entered; rank 1 at veri_tui/trainer/" in err["summary"]
    assert err["summary"].endswith(
        f"(its process (pid {pid}) is stopped (SIGSTOP or a debugger): its stack read from "
        "the process)"
    )
    assert err["summary"] in (job_dir / "log.txt").read_text()
    wait_for(lambda: not leftover_pids(job_dir), 15, "no process of the job left")
