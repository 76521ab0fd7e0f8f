"""`python -m veri_tui.jobfolder status|cancel|resume|close|set-scheduler|checkpoints`: what a
launcher asks a job's host, run here as a host runs it (a fresh interpreter, one JSON document or
one `error:` line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_records import dead_pid, make_job

from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.lost import START_TIMEOUT_S, judge
from veri_tui.jobfolder.contract.record import JobRecord


def jobfolder(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veri_tui.jobfolder", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_status_applies_the_lost_rule_on_the_host(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "20260101-000000-aaaa", supervisor=dead_pid())
    out = jobfolder("status", str(job_dir / "job.json"))
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["status"] == "failed" and record["lost"] is True
    assert record["error"]["code"] == "RANK_LOST"
    assert json.loads((job_dir / "job.json").read_text())["status"] == "running"  # untouched


def test_cancel_records_a_job_whose_supervisor_never_started(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "20260101-000000-bbbb", status="pending")
    out = jobfolder("cancel", str(job_dir / "job.json"), "--grace", "0.5")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "cancelled"
    assert json.loads((job_dir / "job.json").read_text())["status"] == "cancelled"


def test_resume_refusal_is_one_line_and_exit_3(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "20260101-000000-cccc", status="succeeded")
    out = jobfolder("resume", str(job_dir / "job.json"), stdin="null")
    assert out.returncode == 3
    assert out.stdout.startswith("error: job: 20260101-000000-cccc already succeeded")
    cancelled = make_job(tmp_path, "20260101-000000-dddd", status="cancelled")
    out = jobfolder("resume", str(cancelled / "job.json"), "--choice", '{"step": null}')
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["status"] == "pending" and record["resume_choice"] == {"step": None}


def test_checkpoints_lists_and_verifies_each_folder(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "20260101-000000-eeee", status="failed")
    step = job_dir / "checkpoints" / "step-4"
    step.mkdir(parents=True)
    (step / ".metadata").write_bytes(b"meta")
    manifest.write(step)
    (step / "COMPLETE").write_text("")
    listed = jobfolder("checkpoints", "list", str(job_dir))
    assert json.loads(listed.stdout) == {str(job_dir): [4]}
    assert json.loads(jobfolder("checkpoints", "verify", "4", str(job_dir)).stdout) == {
        str(job_dir): ""
    }
    (step / ".metadata").write_bytes(b"meta!")
    found = json.loads(jobfolder("checkpoints", "verify", "4", str(job_dir)).stdout)
    assert "bytes, the manifest says" in found[str(job_dir)]


def test_the_lost_rule_waits_for_a_supervisor_that_has_not_written_its_pid() -> None:
    record: JobRecord = {"status": "pending", "created_at": "2026-01-01T00:00:00+00:00"}
    created = 1767225600.0  # that time, in epoch seconds

    def never(pid: int) -> bool:
        raise AssertionError("no pid to ask about")

    assert judge(record, None, never, lambda: record, now=created + 5) is record
    late = judge(record, None, never, lambda: record, now=created + START_TIMEOUT_S + 1)
    assert late["lost"] and late["error"]["summary"].endswith(
        "its supervisor never started (machine restarted or process killed)"
    )
    remote = judge(record, 123, lambda pid: False, lambda: record, where="gpu-box")
    assert "its supervisor on gpu-box is gone" in remote["error"]["message"]


def test_close_records_a_scheduler_s_outcome_once_and_set_scheduler(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "20260101-000000-dddd")
    job = str(job_dir / "job.json")
    assert jobfolder("set-scheduler", job, "slurm", "417").returncode == 0
    error = {"code": "TIME_LIMIT", "attribution": "customer", "message": "time limit"}
    out = jobfolder("close", job, "--status", "failed", "--error", json.dumps(error))
    assert out.returncode == 0, out.stderr
    record = json.loads((job_dir / "job.json").read_text())
    assert (record["status"], record["error"]) == ("failed", error)
    assert record["scheduler"] == {"name": "slurm", "id": "417"}
    assert record["ended_at"]
    mtime = (job_dir / "job.json").stat().st_mtime_ns
    again = jobfolder("close", job, "--status", "cancelled")  # an outcome stays as written
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "failed"
    assert (job_dir / "job.json").stat().st_mtime_ns == mtime
    bad = jobfolder("close", job, "--status", "running")
    assert bad.returncode == 2 and "invalid choice: 'running'" in bad.stderr
