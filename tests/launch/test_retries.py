"""Platform retries (`max_restarts`), the attempts record, and its writers under the job lock.

End to end (real torchrun, 2 CPU ranks, the tiny model): with `max_restarts=1`, rank 1
SIGKILLed from outside mid-run is retried by the supervisor itself from the newest verified
checkpoint and the job succeeds with the uninterrupted run's loss (that a DATA_ERROR is
never retried: tests/launch/test_end_to_end.py, its data error in a run). Then the rules
without torchrun: which codes retry, the GPU-seconds credited, the real write paths of the
supervisor, cancel and resume racing another writer, and the stdlib modules the supervisor
imports staying Python 3.8-clean at run time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launch_helpers import leftover_pids, wait_ended, wait_for
from resume_helpers import STEPS, killed_job, metrics, reference_run  # noqa: F401

from veri_tui.jobfolder.contract import attempts
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.record import job_error, read_job
from veri_tui.jobfolder.contract.status import ATTRIBUTION, FAILED

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_rank_is_retried_and_the_job_succeeds(home: Path, reference: list[dict]) -> None:
    job_id, job_dir = killed_job(home, "--set", "max_restarts=1")
    rec = wait_ended(job_id, timeout=240)
    assert rec["status"] == "succeeded" and rec["error"] is None, rec.get("error")
    first, second = rec["attempts"]
    assert (first["status"], first["error"]["code"], first["error"]["attribution"]) == (
        "failed",
        "RANK_LOST",
        "platform",
    )
    assert first["error"]["rank"] == 1
    assert second["status"] == "succeeded" and second["resumed_from_step"] >= 10
    assert rec["credited_gpu_s"] == round(first["wall_s"] * 2, 1) > 0
    log = (job_dir / "log.txt").read_text().splitlines()
    assert "retry: RANK_LOST (platform) ended the attempt; restart 1 of 1 (max_restarts)" in log
    assert f"resume: attempt 2 from step-{second['resumed_from_step']} (verified)" in log
    got = metrics(job_dir)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))
    assert abs(got[-1]["loss"] - reference[-1]["loss"]) <= 1e-3 * abs(reference[-1]["loss"])
    wait_for(lambda: not leftover_pids(job_dir), 30, "the supervisor to exit")


def test_only_platform_failures_retry() -> None:
    for code in [*ATTRIBUTION, "RANK_HUNG"]:
        error = {**job_error(code, "x", 2), "attribution": ATTRIBUTION.get(code, "platform")}
        assert attempts.retryable(error) == (code in attempts.RETRY_CODES), code
    assert set(attempts.RETRY_CODES) == {"RANK_LOST", "COMM_ERROR", "HARDWARE_ERROR", "RANK_HUNG"}
    assert not attempts.retryable(None)  # succeeded or cancelled: nothing to retry
    assert not attempts.retryable({"code": "RANK_LOST", "attribution": "pending"})
    spec = {"hyperparameters": {"max_restarts": 2}}
    assert attempts.max_restarts(spec) == 2 and attempts.max_restarts({}) == 0
    assert attempts.max_restarts({**spec, "nnodes": 2}) == 0  # one node alone never restarts


def test_credit_sums_platform_failures_times_gpus() -> None:
    lost = job_error("RANK_LOST", "x", 4)
    oom = job_error("CUDA_OOM", "x", 4)
    done = [
        {"status": FAILED, "error": lost, "wall_s": 10.0, "gpu_count": 4},
        {"status": FAILED, "error": oom, "wall_s": 99.0, "gpu_count": 4},
        {"status": "cancelled", "error": None, "wall_s": 50.0, "gpu_count": 4},
        {"status": FAILED, "error": lost, "wall_s": 2.5, "gpu_count": 2},
    ]
    assert attempts.credited_gpu_s(done) == 45.0


# The write paths of the supervisor (open and close an attempt), of resume and of cancel,
# as the real functions make them, racing a plain locked writer.
CYCLES = 40
LIFECYCLE = """
import sys, time
from pathlib import Path
from veri_tui.jobfolder.contract import attempts
from veri_tui.jobfolder.contract.atomic import modify_job, record_cancel
from veri_tui.jobfolder.contract.status import FAILED
job, go = Path(sys.argv[1]), Path(sys.argv[2])
lost = {"code": "RANK_LOST", "attribution": "platform"}
while not go.exists():
    time.sleep(0.001)
for i in range(%d):
    modify_job(job, lambda r: attempts.open_attempt(r, None))
    modify_job(job, lambda r: attempts.close_attempt(r, FAILED, lost, 1))
    attempts.prepare_resume(job)
    record_cancel(job)
    attempts.prepare_resume(job)
"""
APPENDS = """
import sys, time
from pathlib import Path
from veri_tui.jobfolder.contract.atomic import modify_job
job, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
for i in range(200):
    modify_job(job, lambda record: record.setdefault("a", []).append(i))
"""


def test_supervisor_cancel_and_resume_writes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    write_json_atomic(path, {"job_id": "j", "status": "pending", "spec": {"gpu_count": 2}})
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # The appender names job.json by a relative path: resume ends every process whose
    # command line holds the job's absolute job.json path (a rank a lost supervisor left).
    procs = [
        subprocess.Popen([sys.executable, "-c", code, name, "go"], env=env, cwd=tmp_path)
        for code, name in ((LIFECYCLE % CYCLES, str(path)), (APPENDS, "job.json"))
    ]
    go.touch()
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    record = read_job(path)
    assert record["a"] == list(range(200))
    assert [a["attempt"] for a in record["attempts"]] == list(range(1, CYCLES + 1))
    assert {a["status"] for a in record["attempts"]} == {FAILED}
    assert record["status"] == "pending" and record["resumed_at"]


def test_the_supervisor_runs_on_the_job_folder_package_alone() -> None:
    code = (
        "import sys, json\nimport veri_tui.jobfolder.supervise.supervisor\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'veri_tui')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(out.stdout)
    assert {
        "veri_tui.jobfolder.contract.attempts",
        "veri_tui.jobfolder.contract.ckptindex",
        "veri_tui.jobfolder.contract.manifest",
    } <= set(modules)
    assert [m for m in modules if not m.startswith(("veri_tui.jobfolder", "veri_tui"))] == []
    assert [m for m in modules if m.startswith("veri_tui.trainer")] == []
