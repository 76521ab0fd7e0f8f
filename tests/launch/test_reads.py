"""Reads that never write (veri_tui/launch/handle.py, settle.py): reading a job through the
facade leaves every file as it was, bytes and mtime; a poll that sees a change keeps it
once (the registry's copy, the calibration), and a second poll of the same state writes
nothing. A job that is not there and a host that cannot be reached are told apart by type.

The folders are the compat fixture's (tests/fixtures/compat: a succeeded and a cancelled
local job, a 2-node job's registry entry) plus a running job whose supervisor is gone (the
lost verdict, a reader's, never written)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_compat import JOBS, install

from veri_tui.errors import NotFoundError, UnreachableError
from veri_tui.launch import jobs, registry
from veri_tui.launch.registry import RegistryEntry

LOST = "20261202-134600-dead"


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mtime (ns)."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def _with_lost_job(home: Path) -> None:
    install(home)
    folder = home / "jobs" / LOST
    folder.mkdir()
    record = json.loads((home / "jobs" / JOBS["cancelled"] / "job.json").read_text())
    record.update(job_id=LOST, status="running", ended_at=None, error=None)
    (folder / "job.json").write_text(json.dumps(record))
    (folder / "supervisor.pid").write_text("999999999\n")  # no such process: lost
    (folder / "log.txt").write_text("plan: dp=2\n")


def test_a_read_changes_no_file(home: Path) -> None:
    _with_lost_job(home)
    before = _files(home)
    ids = [JOBS["succeeded"], JOBS["cancelled"], LOST]  # the 2-node job's hosts: tests/ssh
    for job_id in ids:
        jobs.get_job(job_id)
        jobs.read_log(job_id)
        with jobs.open(job_id) as job:
            job.get_job()
            job.read_log(5)
    listed = {r["job_id"]: r for r in jobs.list_jobs()}
    assert set(listed) == {*ids, JOBS["multinode"]}
    assert (listed[LOST]["status"], listed[LOST]["lost"]) == ("failed", True)
    assert jobs.local_jobs()
    assert _files(home) == before
    assert not (home / "calibration.json").exists()  # the succeeded job is read, not folded


def test_a_poll_keeps_what_it_saw_once(home: Path) -> None:
    install(home)
    with jobs.open(JOBS["succeeded"]) as job:
        record = job.poll()
        calibration = home / "calibration.json"
        assert json.loads(calibration.read_text())["folded"] == [JOBS["succeeded"]]
        after = _files(home)
        assert job.poll() == record
        assert _files(home) == after  # the same state again: nothing written
    os.remove(calibration)
    jobs.list_jobs(settle=True)  # `veri-tui jobs` keeps what it lists (settle.py)
    assert json.loads(calibration.read_text())["folded"] == [JOBS["succeeded"]]


def test_not_found_and_unreachable_are_told_apart_by_type(home: Path) -> None:
    install(home)
    with pytest.raises(NotFoundError, match="no job 20990101-000000-none"):
        jobs.get_job("20990101-000000-none")
    folder = home / "jobs" / JOBS["cancelled"]
    (folder / "job.json").write_text("{not json")
    with pytest.raises(NotFoundError, match="unreadable"):
        jobs.get_job(JOBS["cancelled"])
    far = "20261206-040000-0001"  # a job on a host whose name resolves nowhere
    registry.save(RegistryEntry(far, "nowhere.invalid", "/jobs/x", None, sys.executable, {}))
    with pytest.raises(UnreachableError, match="cannot connect") as exc:
        jobs.get_job(far)
    assert not isinstance(exc.value, NotFoundError)
