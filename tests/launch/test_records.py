"""Job records read back from their folders, log line splitting and following, job ids."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.lost import read_status
from veri_tui.launch import jobs
from veri_tui.launch.loglines import LogLine, follow_lines, split_lines
from veri_tui.launch.spec import new_job_id


def make_job(
    home: Path,
    job_id: str,
    status: str = "running",
    created: str | None = None,
    supervisor: int | None = None,
) -> Path:
    job_dir = home / "jobs" / job_id
    job_dir.mkdir(parents=True)
    rec = {
        "job_id": job_id,
        "status": status,
        "error": None,
        "spec": {"gpu_count": 2},
        "created_at": created or time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
    }
    (job_dir / "job.json").write_text(json.dumps(rec))
    if supervisor is not None:
        (job_dir / "supervisor.pid").write_text(f"{supervisor}\n")
    return job_dir


def read_record(job_dir: Path) -> dict:
    """job.json with the one lost rule applied (veri_tui.jobfolder.contract.lost), as every reader
    sees it."""
    return read_status(job_dir / "job.json")


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_split_lines_keeps_offsets_and_leaves_the_partial_line() -> None:
    lines, end = split_lines(b"ab\n\nc\xc3\xa9\nxyz", 10)
    assert lines == [LogLine(10, 13, "ab"), LogLine(13, 14, ""), LogLine(14, 18, "cé")]
    assert end == 18


def test_follow_yields_every_line_once_while_the_file_grows(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_bytes(b"")
    done = threading.Event()

    def writer() -> None:
        with open(log, "ab") as fh:
            for i in range(50):
                fh.write(f"line {i}\n".encode()[: 3 if i % 7 == 0 else None])
                fh.flush()
                if i % 7 == 0:  # a line written in two pieces
                    fh.write(f"line {i}\n".encode()[3:])
                    fh.flush()
            fh.write(b"tail without newline")
        done.set()

    def read_from(off: int) -> bytes:
        with open(log, "rb") as fh:
            fh.seek(off)
            return fh.read()

    threading.Thread(target=writer).start()
    got = list(follow_lines(read_from, done.is_set, 0, poll_s=0.001))
    assert [ln.text for ln in got] == [f"line {i}" for i in range(50)] + ["tail without newline"]
    assert got[-1].end == log.stat().st_size
    # Resuming from any line's end gives exactly the rest.
    rest = list(follow_lines(read_from, lambda: True, got[20].end))
    assert rest == got[21:]


def test_running_job_whose_supervisor_is_gone_is_reported_lost(tmp_path: Path) -> None:
    job_dir = make_job(tmp_path, "j1", supervisor=dead_pid())
    rec = read_record(job_dir)
    assert rec["status"] == "failed" and rec["lost"] is True
    assert rec["error"]["code"] == "RANK_LOST" and "supervisor" in rec["error"]["summary"]
    assert json.loads((job_dir / "job.json").read_text())["status"] == "running"  # untouched


def test_live_supervisor_and_fresh_pending_job_are_trusted(tmp_path: Path) -> None:
    assert read_record(make_job(tmp_path, "j1", supervisor=os.getpid()))["status"] == "running"
    assert read_record(make_job(tmp_path, "j2", status="pending"))["status"] == "pending"
    old = make_job(tmp_path, "j3", status="pending", created="2020-01-01T00:00:00+00:00")
    assert read_record(old)["error"]["summary"].startswith("job lost: its supervisor never")


def test_unknown_bad_and_damaged_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    target = jobs
    with pytest.raises(VeriError, match="no job nope"):
        target.get_job("nope")
    for bad in ("../etc", ".hidden", ""):
        with pytest.raises(VeriError, match="not a job id"):
            target.get_job(bad)
    make_job(tmp_path, "20261129-000001-aaaa", status="succeeded")
    make_job(tmp_path, "20261129-000002-bbbb", status="failed")
    (tmp_path / "jobs" / "20261129-000003-cccc").mkdir()
    (tmp_path / "jobs" / "20261129-000003-cccc" / "job.json").write_text('{"job_id": "trunc')
    (tmp_path / "jobs" / ".20261129-000004-dddd.tmp").mkdir()
    assert [r["job_id"] for r in target.list_jobs()] == [
        "20261129-000002-bbbb",
        "20261129-000001-aaaa",
    ]
    with pytest.raises(VeriError, match="unreadable"):
        target.get_job("20261129-000003-cccc")


def test_job_ids_sort_by_creation_time() -> None:
    before = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    ids = [new_job_id() for _ in range(3)]
    after = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for job_id in ids:
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", job_id)
        assert before <= job_id[:15] <= after  # the UTC creation time leads, so ids sort by it


def test_a_job_s_scheduler_reads_from_its_block_or_an_earlier_release_s_slurm_keys() -> None:
    from veri_tui.jobfolder.contract.record import pending_reason, scheduler_of

    block = {"name": "slurm", "id": "12", "restarts": 2, "state": "PENDING", "reason": "Priority"}
    old = {"slurm_job_id": "12", "slurm_restarts": 2, "slurm_state": "PENDING",
           "slurm_reason": "Priority"}  # fmt: skip
    assert scheduler_of({"scheduler": block}) == scheduler_of(old) == block
    assert scheduler_of({"slurm_job_id": 12}) == {"name": "slurm", "id": "12"}
    assert scheduler_of({"status": "running"}) is None
    assert pending_reason({"status": "pending", "scheduler": block}) == "Priority"
    assert pending_reason({"status": "running", "scheduler": block}) is None
    assert pending_reason({"status": "pending", "scheduler": {**block, "reason": ""}}) is None
