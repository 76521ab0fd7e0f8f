"""Helpers for the launch-side Slurm tests: the CLI in this process, a private VERI_HOME,
the jobs and processes a Slurm job leaves, and the losses of a job's metrics.jsonl."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.slurm_cluster import SlurmCluster

from veri_tui.cli import main
from veri_tui.jobfolder.contract.procs import job_processes

#: A job long enough to be caught running (its steps take well under a second each).
LONG = ("--set", "max_steps=100000")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh $VERI_HOME; any process a job left behind is killed afterwards."""
    path = tmp_path / "veri-home"
    monkeypatch.setenv("VERI_HOME", str(path))
    yield path
    for job_json in path.glob("**/jobs/*/job.json"):
        for pid in job_processes(job_json):
            os.kill(pid, 9)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`veri-tui ARGS` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def slurm_job_dir(home: Path, job_id: str) -> Path:
    """Where a `--slurm local` job's folder is."""
    return home / "slurm" / "jobs" / job_id


def losses(job_dir: Path) -> list[float]:
    """The loss of every step in the job's metrics.jsonl."""
    lines = (job_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if line.strip()]


def active_jobs(cluster: SlurmCluster) -> list[str]:
    """Slurm jobs still pending, running or completing."""
    return cluster.jobs()


def processes_of(job_dir: Path) -> list[int]:
    """Every live process whose command line names the job folder (supervisor, torchrun,
    ranks) or that the job's pid files name."""
    found = set(job_processes(job_dir / "job.json"))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(job_dir).encode() in cmd:
            found.add(int(proc.name))
    return sorted(found)
