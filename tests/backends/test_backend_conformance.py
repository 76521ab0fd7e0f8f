"""The Backend conformance suite: every Backend (conftest.py: local, ssh, two-host, slurm)
through the same cases, through the Backend protocol (veri_tui/launch/backends): the launch
sequence calls its `probe` and `submit` (the facade's `launch`), and the cases call its
`state`, `logs`, `follow` and `cancel` on the job held open (`jobs.open`), as the facade
does; a resume submits the job again. A new Backend is done when it passes these.

Per backend one job, two attempts (the bundled tiny model, 2 CPU ranks, sequences of 64
tokens, a checkpoint every 10 steps, too many steps to end by itself): two torchrun starts
per backend, the suite's whole cost.

- launched: its typed handle (`JobRef`) names its backend, the job and every node, each
  started; rank 1 SIGKILLed from outside once checkpoints/step-10 is committed; followed to
  the end: failed, its error naming rank 1 (RANK_LOST, platform), no process left;
- resumed: the new attempt starts from that checkpoint (its first step the one after it),
  submitted again (a handle per node);
- cancelled while it runs: cancelled, and no process of it (nor a Slurm job) is left on any
  node.
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

from veri_tui.jobfolder.contract.procs import GRACE_S, job_processes, pid_alive, read_pid
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch import backends, jobs
from veri_tui.launch.backends.ref import JobRef
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STEPS = 100_000  # never reached: the job ends by the kill, then by the cancel
CHECKPOINT = 10
SETS = [f"checkpoint_steps={CHECKPOINT}", "max_seq_length=64"]


def _launch(backend: Backend, max_steps: int) -> str:
    """Launch the tiny job on the backend; its id."""
    job = load_job_config(None, model=str(bundled_tiny_model()), gpu_count=2,
                          sets=[f"max_steps={max_steps}", *SETS])  # fmt: skip
    return jobs.launch(job, None, host=backend.where)


def _ref(job_id: str) -> JobRef:
    """The job's typed handle, as the job opened again holds it (its registry entry, or on
    this machine its folder)."""
    with jobs.open(job_id) as opened:
        return opened.target.ref


def _state(job_id: str) -> JobRecord:
    """The job's record, by its backend's `state` on the job held open."""
    with jobs.open(job_id) as job:
        return job.backend.state(job.target)


def _logs(job_id: str, offset: int = 0) -> bytes:
    """Rank 0's log from ``offset``, by its backend's `logs`."""
    with jobs.open(job_id) as job:
        return job.backend.logs(job.target, offset)


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


def _follow(job_id: str, offset: int = 0) -> tuple[list[str], JobRecord]:
    """Every rank-0 log line from ``offset`` until the job ends (its backend's `follow`), and
    the final record (its `state`)."""
    with jobs.open(job_id) as job:
        lines = [line.text for line in job.backend.follow(job.target, offset)]
        return lines, job.backend.state(job.target)


@dataclass
class Failed:
    """The shared job: its id, its handle as launched, every node's job folder (node 0
    first)."""

    job_id: str
    ref: JobRef
    dirs: list[Path]


@pytest.fixture(scope="module")
def failed(backend: Backend) -> Iterator[Failed]:
    """The job with rank 1 SIGKILLed once step-10 is committed (not yet followed)."""
    job_id = _launch(backend, STEPS)
    dirs = [Path(n.job_dir) for n in _ref(job_id).nodes]
    ckpt = dirs[0] / "checkpoints" / f"step-{CHECKPOINT}"
    wait_for(ckpt.is_dir, 240, f"{ckpt.name} committed")
    ref = _ref(job_id)  # its supervisors running: every node's handle known
    rank1 = wait_for(lambda: _pid_of_rank(dirs, 1), 30, "rank 1's pid file")
    os.kill(rank1, signal.SIGKILL)
    yield Failed(job_id, ref, dirs)


def test_submit_returns_a_typed_handle(backend: Backend, failed: Failed) -> None:
    ref = failed.ref
    expected = backends.destination(backend.where).backend
    assert (ref.backend, ref.job_id) == (expected.name, failed.job_id), ref
    assert ref.kind in expected.kinds, ref
    assert len(ref.nodes) == (2 if backend.name == "two-host" else 1), ref
    assert all(n.handle is not None for n in ref.nodes) and all(d.is_dir() for d in failed.dirs)


def test_follow_to_the_end_names_the_failing_rank(backend: Backend, failed: Failed) -> None:
    lines, record = _follow(failed.job_id)
    assert any(ln.startswith('{"step"') for ln in lines), lines[-20:]
    assert record["status"] == "failed", record
    error = record["error"]
    assert error["summary"].startswith("rank 1/2 (") and " failed: " in error["summary"], error
    assert "SIGKILL" in error["summary"], error
    assert (error["rank"], error["code"], error["attribution"]) == (1, "RANK_LOST", "platform")
    wait_for(lambda: not _processes(failed.dirs), 60, "every process of the failed job to end")


@dataclass
class Resumed:
    """The resumed attempt, once it logged a step: its record then, the log from the resume."""

    record: dict
    log: str


@pytest.fixture(scope="module")
def resumed(backend: Backend, failed: Failed) -> Resumed:
    """The failed job resumed, once the new attempt logged its first step."""
    wait_for(lambda: has_ended(_state(failed.job_id)), 120, "the failed attempt to end")
    offset = len(_logs(failed.job_id))
    jobs.resume(failed.job_id)
    log = wait_for(lambda: _stepped(_logs(failed.job_id, offset)), 240,
                   "the resumed attempt's first step")  # fmt: skip
    return Resumed(_state(failed.job_id), log)


def _stepped(log: bytes) -> str | None:
    """The log's complete lines once one of them is a metric line; else None."""
    text = log.decode("utf-8", "replace")
    complete = text[: text.rfind("\n") + 1]
    return complete if any(ln.startswith('{"step"') for ln in complete.splitlines()) else None


def test_resume_continues_from_the_checkpoint(backend: Backend, resumed: Resumed) -> None:
    record = resumed.record
    assert [a["attempt"] for a in record["attempts"]] == [1, 2], record["attempts"]
    assert record["attempts"][0]["status"] == "failed" and record["status"] == "running", record
    step = record["attempts"][1]["resumed_from_step"]
    assert step is not None and step >= CHECKPOINT, record["attempts"]
    assert f"from step-{step}" in resumed.log, resumed.log[-3000:]
    first = next(ln for ln in resumed.log.splitlines() if ln.startswith('{"step"'))
    assert json.loads(first)["step"] == step + 1, first


def test_cancel_leaves_no_process(backend: Backend, failed: Failed, resumed: Resumed) -> None:
    with jobs.open(failed.job_id) as job:
        job.backend.cancel(job.target, GRACE_S)
        record = job.backend.state(job.target)
    assert record["status"] == "cancelled", record
    record = _state(failed.job_id)
    assert [(a["attempt"], a["status"]) for a in record["attempts"]] == [
        (1, "failed"), (2, "cancelled")]  # fmt: skip
    wait_for(lambda: not _processes(failed.dirs), 30, "every process of the cancelled job to end")
    if backend.cluster is not None:
        assert backend.cluster.jobs() == []
