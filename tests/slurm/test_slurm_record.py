"""What a Slurm job's supervisor records at the start of an allocation
(veri_tui/jobfolder/supervise/slurmjob.py), on real job folders and no cluster: the allocation's
keys, an attempt the previous allocation left open, and requeues beyond `max_restarts`. The
end-to-end cases
are test_slurm_requeue.py's, on the real cluster."""

from __future__ import annotations

import time
from pathlib import Path

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.jobfolder.supervise.slurmjob import begin_allocation
from veri_tui.jobfolder.supervise.srun_tasks import SlurmRun


def _job(tmp_path: Path, status: str, attempts: list[dict], restarts: int = 1) -> Path:
    spec = {"gpu_count": 2, "slurm": {"nodes": 2}, "hyperparameters": {"max_restarts": restarts}}
    job = tmp_path / "job.json"
    write_json_atomic(job, {"job_id": "j", "status": status, "spec": spec, "attempts": attempts})
    (tmp_path / "log.txt").write_text("step 7\n")
    return job


def test_an_attempt_left_open_by_a_killed_allocation_is_closed_preempted(tmp_path: Path) -> None:
    started = time.time() - 40
    open_one = {"attempt": 1, "status": "running", "started_s": started, "gpu_count": 2}
    job = _job(tmp_path, "running", [open_one])
    assert begin_allocation(job, SlurmRun("77", 1, ["a", "b"], 2))
    rec = read_job(job)
    assert rec["status"] == "pending"
    assert rec["scheduler"] == {"name": "slurm", "id": "77", "restarts": 1}
    first = rec["attempts"][0]
    assert (first["status"], first["error"]["code"]) == ("failed", "PREEMPTED")
    assert first["error"]["attribution"] == "platform"
    assert first["error"]["message"] == (
        "attempt 1 ended without an outcome: Slurm ended its allocation and requeued job 77 "
        "(restart 1)"
    )
    assert 39 <= first["wall_s"] <= 300  # until the log was last written, not until now
    assert rec["credited_gpu_s"] == round(first["wall_s"] * 2, 1)
    assert first["error"]["message"] in (tmp_path / "log.txt").read_text()


def test_requeues_beyond_max_restarts_fail_the_job_naming_the_count(tmp_path: Path) -> None:
    closed = {"attempt": 1, "status": "failed", "error": {"code": "PREEMPTED"}, "gpu_count": 2}
    job = _job(tmp_path, "pending", [closed], restarts=1)
    assert not begin_allocation(job, SlurmRun("78", 2, ["a", "b"], 2))
    rec = read_job(job)
    assert rec["status"] == "failed" and rec["error"]["code"] == "PREEMPTED"
    assert rec["error"]["summary"] == (
        "job failed: Slurm requeued job 78 2 times, more than max_restarts 1 allows; not "
        "started again (`veri-tui resume` continues from its newest verified checkpoint)"
    )
    assert rec["attempts"] == [closed]  # the preempted attempt keeps its own outcome
    assert (tmp_path / "exit_code").read_text() == "1\n"


def test_a_job_cancelled_while_pending_stays_cancelled(tmp_path: Path) -> None:
    job = _job(tmp_path, "cancelled", [])
    assert not begin_allocation(job, SlurmRun("79", 1, ["a"], 1))
    assert read_job(job)["status"] == "cancelled" and "scheduler" not in read_job(job)
