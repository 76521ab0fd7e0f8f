"""The supervisor under the real torchrun with 2 processes, ranks played by the stand-in.

These pin the supervisor's own logic (status, exit code, failure report, cancel, orphaned
ranks) in seconds; tests/launch/test_end_to_end.py runs the same paths with the real trainer.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.launch.conftest import PLAN_LINE, leftover_pids, standin_record, wait_ended, wait_for
from trainer.supervise import pid_alive, read_pid
from veri_tui.launch.local import LocalTarget

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def start(target: LocalTarget, job_id: str, steps: int = 3) -> Path:
    job_dir = target.job_dir(job_id)
    target.start(standin_record(job_id, job_dir, steps=steps))
    return job_dir


def test_success_records_status_exit_code_and_log(standin: LocalTarget) -> None:
    job_dir = start(standin, "20261129-000001-aaaa")
    rec = wait_ended(standin, "20261129-000001-aaaa")
    assert rec["status"] == "succeeded" and rec["error"] is None
    assert rec["started_at"] and rec["ended_at"] and rec["exit_code"] == 0
    assert (job_dir / "exit_code").read_text().strip() == "0"
    lines = (job_dir / "log.txt").read_text().splitlines()
    assert lines[:3] == ["model: tiny", "budget: 15.3 GB/GPU", PLAN_LINE]
    assert [json.loads(ln)["step"] for ln in lines[3:]] == [1, 2, 3]
    assert not leftover_pids(job_dir)


def test_failure_names_the_rank_and_appends_the_report(
    standin: LocalTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_FAULT", "raise:1:2")
    job_dir = start(standin, "20261129-000002-aaaa", steps=50)
    rec = wait_ended(standin, "20261129-000002-aaaa")
    err = rec["error"]
    assert rec["status"] == "failed" and rec["exit_code"] != 0
    assert (err["rank"], err["local_rank"], err["node"], err["world_size"]) == (1, 1, 0, 2)
    summary = "rank 1/2 (node 0, local_rank 1) failed: RuntimeError: injected failure at step 2"
    assert err["summary"].startswith(summary)
    tail = (job_dir / "log.txt").read_text().splitlines()
    i = tail.index(err["summary"])
    assert tail[i + 1] == PLAN_LINE and tail[i + 2].startswith("Traceback")


def test_signal_killed_rank_is_rank_lost(standin: LocalTarget, monkeypatch) -> None:
    monkeypatch.setenv("VERI_FAULT", "kill:1:2")
    start(standin, "20261129-000003-aaaa", steps=50)
    err = wait_ended(standin, "20261129-000003-aaaa")["error"]
    assert (err["code"], err["attribution"], err["rank"]) == ("RANK_LOST", "platform", 1)
    assert "signal 9 (SIGKILL)" in err["summary"]


def test_cancel_ends_every_rank(standin: LocalTarget, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_STEP_S", "0.5")
    job_dir = start(standin, "20261129-000004-aaaa", steps=200)
    wait_for(lambda: len(list((job_dir / "pids").glob("rank-*"))) == 2, 30, "both ranks")
    t0 = time.monotonic()
    rec = standin.cancel("20261129-000004-aaaa")
    assert time.monotonic() - t0 < 10  # the contract's bound, not a speed target
    assert rec["status"] == "cancelled" and rec["error"] is None
    assert not leftover_pids(job_dir)


def test_cancel_after_torchrun_was_sigkilled(standin: LocalTarget, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_STEP_S", "0.5")
    job_dir = start(standin, "20261129-000005-aaaa", steps=200)
    wait_for(lambda: len(list((job_dir / "pids").glob("rank-*"))) == 2, 30, "both ranks")
    os.kill(read_pid(job_dir / "torchrun.pid"), signal.SIGKILL)
    ranks = [read_pid(p) for p in (job_dir / "pids").glob("rank-*")]
    # The orphaned ranks keep running, and the job with them, until cancelled.
    assert standin.get_job("20261129-000005-aaaa")["status"] == "running"
    assert all(pid_alive(pid) for pid in ranks)
    t0 = time.monotonic()
    rec = standin.cancel("20261129-000005-aaaa")
    assert time.monotonic() - t0 < 10
    assert rec["status"] == "cancelled"
    assert not leftover_pids(job_dir)
    assert not any(pid_alive(pid) for pid in ranks)  # gone, or a zombie awaiting pid 1
