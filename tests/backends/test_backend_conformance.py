"""The Backend conformance suite: every Backend (conftest.py: local, ssh, two-host, slurm)
through the same cases, through the launch facade (veri_tui.launch.jobs) the CLI and the
app use. A new Backend is done when it passes these.

Per backend, two jobs (the bundled tiny model, 2 CPU ranks, sequences of 64 tokens):

- `failed` (one per backend, shared): launched, followed from here; rank 1 SIGKILLed from
  outside once checkpoints/step-10 is committed. Followed to the end it has failed, its
  error naming rank 1 (RANK_LOST); resumed, the new attempt starts from that checkpoint and
  is followed to the end: succeeded, every step in metrics.jsonl once, no process left.
- a long job, cancelled once it logged a step: cancelled, and no process of it (nor a Slurm
  job) is left on any node.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from launch.launch_helpers import wait_for
from support.backends import Backend

from jobfolder.procs import job_processes, pid_alive, read_pid
from jobfolder.status import has_ended
from veri_tui.launch import jobs
from veri_tui.plan import load_job_config
from veri_tui.plan.sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 30
CHECKPOINT = 10
SETS = [f"checkpoint_steps={CHECKPOINT}", "max_seq_length=64"]


def _launch(backend: Backend, max_steps: int) -> tuple[str, list[Path]]:
    """Launch the tiny job on the backend; (job id, every node's job folder, node 0 first)."""
    job = load_job_config(None, model=str(bundled_tiny_model()), gpu_count=2,
                          sets=[f"max_steps={max_steps}", *SETS])  # fmt: skip
    job_id = jobs.launch(job, None, host=backend.where)
    target = jobs.target_for(job_id)
    try:
        return job_id, [Path(n.job_dir) for n in target.nodes]
    finally:
        target.close()


def _pid_of_rank(dirs: list[Path], rank: int) -> int | None:
    """The pid of global rank ``rank``, from the pid file of whichever node runs it."""
    return next((p for d in dirs if (p := read_pid(d / "pids" / f"rank-{rank}"))), None)


def _processes(dirs: list[Path]) -> list[int]:
    """Every live process of the job on any node: by its pid files, and every process whose
    command line names a node's folder (a batch job's shell, srun, the supervisor)."""
    found: set[int] = set()
    for d in dirs:
        found.update(job_processes(d / "job.json"))
        sup = read_pid(d / "supervisor.pid")
        if sup and pid_alive(sup):
            found.add(sup)
    needles = [str(d).encode() for d in dirs]
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if any(n in cmd for n in needles):
            found.add(int(proc.name))
    return sorted(found)


def _follow(job_id: str, offset: int = 0) -> tuple[list[str], dict]:
    """Every rank-0 log line from ``offset`` until the job ends, and the final record."""
    lines = [line.text for line in jobs.follow_log(job_id, offset)]
    return lines, jobs.get_job(job_id)


@dataclass
class Failed:
    """The shared job: its id, node folders, and the log offset where following began."""

    job_id: str
    dirs: list[Path]


@pytest.fixture(scope="module")
def failed(backend: Backend) -> Iterator[Failed]:
    """The job with rank 1 SIGKILLed once step-10 is committed (not yet followed)."""
    job_id, dirs = _launch(backend, STEPS)
    ckpt = dirs[0] / "checkpoints" / f"step-{CHECKPOINT}"
    wait_for(ckpt.is_dir, 240, f"{ckpt.name} committed")
    rank1 = wait_for(lambda: _pid_of_rank(dirs, 1), 30, "rank 1's pid file")
    os.kill(rank1, signal.SIGKILL)
    yield Failed(job_id, dirs)


def test_follow_to_the_end_names_the_failing_rank(backend: Backend, failed: Failed) -> None:
    lines, record = _follow(failed.job_id)
    assert any(ln.startswith('{"step"') for ln in lines), lines[-20:]
    assert record["status"] == "failed", record
    error = record["error"]
    assert error["summary"].startswith("rank 1/2 (") and " failed: " in error["summary"], error
    assert "SIGKILL" in error["summary"], error
    assert (error["rank"], error["code"], error["attribution"]) == (1, "RANK_LOST", "platform")
    wait_for(lambda: not _processes(failed.dirs), 60, "every process of the failed job to end")


def test_resume_continues_from_the_checkpoint(backend: Backend, failed: Failed) -> None:
    wait_for(lambda: has_ended(jobs.get_job(failed.job_id)), 120, "the failed attempt to end")
    offset = len(jobs.read_log(failed.job_id))
    resumed = jobs.resume(failed.job_id)
    assert resumed["status"] in ("pending", "running"), resumed
    lines, record = _follow(failed.job_id, offset)
    assert record["status"] == "succeeded", (record, lines[-20:])
    assert [(a["attempt"], a["status"]) for a in record["attempts"]] == [
        (1, "failed"), (2, "succeeded")]  # fmt: skip
    step = record["attempts"][1]["resumed_from_step"]
    assert step is not None and step >= CHECKPOINT, record["attempts"]
    assert any(f"from step-{step}" in ln for ln in lines), lines[:20]
    metrics = (failed.dirs[0] / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["step"] for m in metrics] == list(range(1, STEPS + 1))
    wait_for(lambda: not _processes(failed.dirs), 60, "every process of the resumed job to end")


def test_cancel_leaves_no_process(backend: Backend) -> None:
    job_id, dirs = _launch(backend, 100_000)
    wait_for(lambda: b'{"step"' in jobs.read_log(job_id), 240, "rank 0's first step")
    record = jobs.cancel(job_id)
    assert record["status"] == "cancelled", record
    assert jobs.get_job(job_id)["status"] == "cancelled"
    wait_for(lambda: not _processes(dirs), 30, "every process of the cancelled job to end")
    if backend.cluster is not None:
        assert backend.cluster.jobs() == []
