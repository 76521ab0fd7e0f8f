"""A Slurm job that ended without its supervisor recording an outcome, on the real cluster:
a read shows the outcome its controller reports and writes nothing (job.json keeps its
bytes and mtime); the first poll records it in job.json (`python -m veri_tui.jobfolder close` on
the login node, launch/settle.py) and in the registry entry, and a second poll writes
nothing. The batch job is a bare `sleep` scancelled by hand: no supervisor to record it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from launch.launch_helpers import wait_for
from slurm_helpers import home, slurm_job_dir
from support.slurm_cluster import SlurmCluster

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.launch import jobs, registry
from veri_tui.launch.registry import RegistryEntry

__all__ = ["home"]  # the fixture, imported for the test below

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _stat(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def test_a_read_shows_the_controller_s_outcome_a_poll_records_it(
    slurm: SlurmCluster, home: Path
) -> None:
    job_id = "20261206-041000-5106"
    job_dir = slurm_job_dir(home, job_id)
    job_dir.mkdir(parents=True)
    slurm_id = slurm.run("sbatch", "--parsable", "-p", "debug", "--wrap", "sleep 300").strip()
    record = {"job_id": job_id, "format": 1, "status": "pending", "error": None,
              "spec": {"gpu_count": 1}, "slurm_job_id": slurm_id,
              "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())}  # fmt: skip
    write_json_atomic(job_dir / "job.json", record)
    registry.save(RegistryEntry(job_id, "local", str(job_dir), slurm_id, sys.executable,
                                dict(record), kind="slurm"))  # fmt: skip
    slurm.run("scancel", slurm_id)
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to leave the queue")
    entry = registry.entry_path(job_id)
    before = _stat(job_dir / "job.json"), _stat(entry)
    seen = jobs.get_job(job_id)
    assert (seen["status"], seen["scheduler"]["state"]) == ("cancelled", "CANCELLED")
    assert (_stat(job_dir / "job.json"), _stat(entry)) == before  # a read wrote nothing
    with jobs.open(job_id) as job:
        assert job.poll()["status"] == "cancelled"
        kept = json.loads((job_dir / "job.json").read_text())
        assert kept["status"] == "cancelled" and kept["ended_at"]
        assert json.loads(entry.read_text())["record"]["status"] == "cancelled"
        after = _stat(job_dir / "job.json"), _stat(entry)
        job.poll()  # the same state: nothing more to keep
        assert (_stat(job_dir / "job.json"), _stat(entry)) == after
