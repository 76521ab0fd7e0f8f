"""Preemption, requeue and resume on another node count, on the real test cluster.

The job: the bundled tiny model, FSDP2 (zero_stage 3), 2 CPU ranks on 2 nodes (one srun
task and one torchrun per node, c10d rendezvous on the first node), 40 steps, a checkpoint
every 10, micro-batches of 2, submitted with the contract's batch script
(requeue_helpers.py). The reference is the same plan run uninterrupted as a local job by the
same supervisor (no Slurm keys).

- preempted twice: a grace signal (SIGTERM to the job's steps, as slurmctld sends it at a
  preemption, the job left running) once step-10 is committed, then `scontrol requeue`
  once step-30 is. Each time the attempt ends PREEMPTED (platform) and the job is pending
  (the first time the supervisor requeues it itself); each time the ranks stop after one
  agreed step with a checkpoint of it, the cause logged before that checkpoint; Slurm
  starts the job again ~11-20 s later ($SLURM_RESTART_COUNT 1, then 2) and the supervisor
  resumes by itself from that step: every step's loss equals the reference's.
- the time limit (SIGUSR1 to the batch shell, as `--signal=B:USR1@120` sends it) stops it
  the same way, failed TIME_LIMIT (customer); resumed on 2 nodes x 2 ranks (the global batch
  of 4 kept: micro-batches of 1) it loads the 2-rank global DCP checkpoint resharded over 4
  FSDP2 ranks and ends within 2% of the reference (the split of a global batch changes the
  losses only by rounding).
- a rank SIGKILLed on node 1 is named, with its node, code and attribution, from what every
  node left in the shared folder; a cancel (the marker, then SIGTERM to the whole job) ends
  every rank and records `cancelled`; and what each signal means is read from the real
  controller (`SlurmRun.classify`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from requeue_helpers import (
    EVERY,
    STEPS,
    losses,
    make_job,
    replace_layout,
    submit,
    wait_ended,
    wait_record,
)
from support.slurm_cluster import NODES, SlurmCluster

from veri_tui.jobfolder.contract.attempts import prepare_resume
from veri_tui.jobfolder.contract.ckptindex import committed as committed_steps
from veri_tui.jobfolder.contract.layout import CANCEL_REQUEST
from veri_tui.jobfolder.contract.procs import job_processes
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.jobfolder.contract.stopping import PREEMPTED, TIME_LIMIT, read_stopped
from veri_tui.jobfolder.supervise.srun_tasks import CANCEL, SlurmRun, seconds

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
ZERO = {"zero_stage": 3, "micro_batch_size": 2}  # FSDP2; a global batch of 4


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, float]]:
    """(step, loss) of the job run uninterrupted, locally, by the same supervisor."""
    job = make_job(tmp_path_factory.mktemp("ref"), "reference", 2, 1, slurm=False, **ZERO)
    cmd = [sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(job)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:] + (job.parent / "log.txt").read_text()[-2000:]
    got = losses(job.parent)
    assert [s for s, _ in got] == list(range(1, STEPS + 1))
    return got


def committed(job: Path, step: int) -> None:
    """Wait until checkpoints/step-<step> is committed (renamed into place)."""
    folder = job.parent / "checkpoints" / f"step-{step}"
    deadline = time.monotonic() + 180
    while not folder.is_dir():
        assert time.monotonic() < deadline, f"{folder} never committed"
        time.sleep(0.05)


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def preempted(job: Path, attempts: int, how: list[str], t0: float) -> tuple[int, bool]:
    """Wait until the job is pending again with ``attempts`` attempts and check that the last
    one ended PREEMPTED (platform). Returns (the newest committed step then, which the next
    attempt must resume from; whether the ranks stopped with a checkpoint of their own)."""
    rec = wait_record(
        job,
        lambda r: r["status"] == "pending" and len(r.get("attempts") or []) == attempts,
        90,
        f"preemption {attempts} recorded",
    )
    how.append(f"{time.monotonic() - t0:.1f} s")
    last = rec["attempts"][-1]
    assert (last["status"], last["error"]["code"]) == ("failed", "PREEMPTED")
    assert last["error"]["attribution"] == "platform"
    newest = committed_steps(job.parent / "checkpoints")[0][0]
    stopped = read_stopped(job.parent)
    if stopped is None:  # ended before a step boundary: the message says so
        assert "its ranks ended before they could stop" in last["error"]["message"]
        return newest, False
    step = stopped["step"]  # the step every rank stopped after, saved as its checkpoint
    assert stopped["reason"] == "preempted" and stopped["checkpoint"] == f"step-{step}"
    assert f"stopped after step {step}, checkpoint step-{step};" in last["error"]["message"]
    assert step == newest
    return step, True


@pytest.mark.trial  # two preemptions in a row: about 110 s (docs/trials.md)
def test_requeue_mid_run_resumes_by_itself_with_the_uninterrupted_losses(
    slurm: SlurmCluster, tmp_path: Path, reference: list[tuple[int, float]]
) -> None:
    job = make_job(tmp_path, "requeued", 2, 1, max_restarts=2, **ZERO)
    job_id = submit(slurm, job, 2, 1)
    committed(job, EVERY)
    recorded: list[str] = []
    # A preemption's grace signal, as slurmctld sends it: SIGTERM to the job's steps (torchrun
    # and the ranks on every node; not the batch shell, nor srun), the job left running. The
    # ranks stop after one agreed step with a checkpoint of it; the supervisor, which got no
    # signal, reads that as the preemption and requeues the job itself.
    t0 = time.monotonic()
    slurm.run("scancel", "--signal=TERM", job_id)
    first, graceful = preempted(job, 1, recorded, t0)
    assert graceful  # a fresh checkpoint of the step it stopped after, not the older one
    log = (job.parent / "log.txt").read_text().splitlines()
    cause = log.index(f"stop: asked to stop (preempted, SIGTERM from Slurm) after step {first}")
    assert log.index(f"checkpoint: step-{first} committed") > cause  # the cause comes first
    committed(job, 3 * EVERY)  # running again, resumed from `first`
    t0 = time.monotonic()
    slurm.run("scontrol", "requeue", job_id)  # Slurm's own requeue: it ends the allocation
    second, graceful = preempted(job, 2, recorded, t0)
    assert graceful  # Slurm's requeue leaves the ranks KillWait to stop with a checkpoint
    rec = wait_ended(job, 240)
    print(f"requeue: the preempted attempts recorded {' and '.join(recorded)} after the signal")

    assert rec["status"] == "succeeded", rec.get("error")
    assert (rec["scheduler"]["id"], rec["scheduler"]["restarts"]) == (job_id, 2)
    assert EVERY <= first < 3 * EVERY <= second < STEPS
    steps = [(a["status"], a["resumed_from_step"]) for a in rec["attempts"]]
    assert steps == [("failed", None), ("failed", first), ("succeeded", second)]
    log = (job.parent / "log.txt").read_text().splitlines()
    assert f"resume: attempt 2 from step-{first} (verified)" in log
    assert f"resume: attempt 3 from step-{second} (verified)" in log
    lost = sum(a["wall_s"] * 2 for a in rec["attempts"][:2])
    assert abs(rec["credited_gpu_s"] - lost) <= 0.2 and lost > 0
    # One global DCP checkpoint in the one shared folder: `.metadata`, no rank-local parts.
    ckpt = job.parent / "checkpoints" / f"step-{STEPS}"
    assert (ckpt / ".metadata").is_file() and not list(ckpt.glob("__*.metadata"))
    got = losses(job.parent)
    assert [s for s, _ in got] == list(range(1, STEPS + 1))  # each step once
    assert all(close(g, r, 1e-6) for (_, g), (_, r) in zip(got, reference, strict=True))
    wait_record(job, lambda r: job_id not in slurm.jobs(), 60, "the allocation to end")
    assert not job_processes(job)


@pytest.mark.trial  # a stop, then a resume on 4 ranks: about 60-100 s (docs/trials.md)
def test_time_limit_stop_then_resume_on_four_ranks_reshards_the_checkpoint(
    slurm: SlurmCluster, tmp_path: Path, reference: list[tuple[int, float]]
) -> None:
    job = make_job(tmp_path, "timed", 2, 1, **ZERO)
    job_id = submit(slurm, job, 2, 1, "--time=3")
    committed(job, EVERY)
    slurm.run("scancel", "--batch", "--signal=USR1", job_id)  # what --signal=B:USR1@120 sends
    rec = wait_ended(job, 120)
    assert rec["status"] == "failed" and rec["error"]["code"] == "TIME_LIMIT"
    assert rec["error"]["attribution"] == "customer"
    stopped = read_stopped(job.parent)
    assert stopped is not None and stopped["reason"] == "time_limit"
    step = stopped["step"]
    assert f"stopped after step {step}, checkpoint step-{step};" in rec["error"]["message"]
    assert "`veri-tui resume` continues" in rec["error"]["message"]
    wait_record(job, lambda r: job_id not in slurm.jobs(), 60, "the allocation to end")

    replace_layout(job, 2, 2)  # what a resume on another layout changes: 2 ranks a node
    prepare_resume(job)
    rp = read_job(job)["resolved_parallelism"]
    assert (rp["data_parallel_size"], rp["micro_batch_size"], rp["global_batch_size"]) == (4, 1, 4)
    submit(slurm, job, 2, 2)
    rec = wait_ended(job, 240)
    assert rec["status"] == "succeeded", rec.get("error")
    assert [a["resumed_from_step"] for a in rec["attempts"]] == [None, step]
    assert rec["attempts"][1]["gpu_count"] == 4
    got = losses(job.parent)
    assert [s for s, _ in got] == list(range(1, STEPS + 1))
    assert got[:step] == reference[:step]  # the first attempt's steps, on 2 nodes
    rel = max(abs(g / r - 1) for (_, g), (_, r) in zip(got[step:], reference[step:], strict=True))
    print(f"resumed on 2 nodes x 2 ranks from step-{step}: worst loss difference {rel:.2e}")
    assert rel <= 2e-2


def test_a_sigkilled_rank_on_node_1_is_named_from_the_shared_folder(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    job = make_job(tmp_path, "killed", 2, 1, max_steps=EVERY)
    # Rank 1 (node 1's only rank) SIGKILLs itself at step 3: no record of its own.
    job_id = submit(slurm, job, 2, 1, env={"VERI_FAULT": "kill:1:3"})
    rec = wait_ended(job, 180)
    err = rec["error"]
    assert rec["status"] == "failed", err
    assert (err["code"], err["attribution"], err["rank"], err["node"]) == (
        "RANK_LOST",
        "platform",
        1,
        1,
    )
    assert err["summary"].startswith("rank 1/2 (node 1, local_rank 0) failed: killed by signal 9")
    assert rec["scheduler"]["id"] == job_id
    log = (job.parent / "log.txt").read_text().splitlines()
    assert err["summary"] in log and any(ln.startswith("plan: dp=2 ") for ln in log)


def test_what_a_signal_means_is_read_from_the_controller(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    script = tmp_path / "sleep.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/out\nsleep 120\n")
    job_id = slurm.run("sbatch", "--parsable", "--requeue", "--time=3", str(script)).strip()
    wait_record_state(slurm, job_id, "RUNNING")
    run = SlurmRun(job_id, 0, list(NODES), 1)
    assert run.classify(signal.SIGUSR1, tmp_path) == (TIME_LIMIT, False)  # 3 min: near
    assert run.classify(signal.SIGTERM, tmp_path) == (PREEMPTED, True)  # a grace signal
    (tmp_path / CANCEL_REQUEST).touch()
    assert run.classify(signal.SIGTERM, tmp_path) == (CANCEL, False)
    (tmp_path / CANCEL_REQUEST).unlink()
    slurm.run("scontrol", "requeue", job_id)  # Restarts rises at once: Slurm requeues it
    assert run.classify(signal.SIGTERM, tmp_path) == (PREEMPTED, False)
    assert seconds("1-02:03:04") == 93784 and seconds("05:00") == 300
    assert seconds("UNLIMITED") is None


def wait_record_state(slurm: SlurmCluster, job_id: str, state: str) -> None:
    """Wait until squeue shows the job in ``state``."""
    deadline = time.monotonic() + 60
    while slurm.run("squeue", "-h", "-j", job_id, "-o", "%T").strip() != state:
        assert time.monotonic() < deadline, f"job {job_id} never {state}"
        time.sleep(0.2)


def test_a_cancel_with_its_marker_ends_every_rank_and_records_cancelled(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    job = make_job(tmp_path, "cancelled", 2, 1, max_restarts=1)
    job_id = submit(slurm, job, 2, 1)
    committed(job, EVERY)
    # The launch side's cancel: the marker, then SIGTERM to every process of the job.
    (job.parent / CANCEL_REQUEST).write_text("cancel\n")
    t0 = time.monotonic()
    slurm.run("scancel", "--signal=TERM", "--full", job_id)
    rec = wait_ended(job, 60)
    took = time.monotonic() - t0
    print(f"cancel: recorded {took:.1f} s after scancel --signal=TERM")
    assert rec["status"] == "cancelled" and rec["error"] is None
    assert len(rec["attempts"]) == 1  # no stop checkpoint, no requeue
    log = (job.parent / "log.txt").read_text().splitlines()
    assert log[-1] == "job cancelled: every rank ended"
    assert read_stopped(job.parent) is None
    assert not list((job.parent / "checkpoints").glob("*.tmp"))
    wait_record(job, lambda r: job_id not in slurm.jobs(), 60, "the allocation to end")
    assert not job_processes(job)
