"""The hang watchdog (veri_tui/jobfolder/supervise/watchdog.py) over the ranks' progress lines
(veri_tui/jobfolder/supervise/progress.py).

Unit cases drive `HangWatch` with a fake clock and real progress files; the end-to-end case
runs the real trainer under torchrun (2 CPU ranks, gloo), SIGSTOPs rank 1 from outside after
step 5 and checks the job fails RANK_HUNG, rank 1 named, with no process left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch_helpers import leftover_pids, wait_ended, wait_for

from veri_tui.jobfolder.contract.procs import rank_pid_path, read_pid, write_pid
from veri_tui.jobfolder.supervise.progress import (
    RECORD_BYTES,
    Progress,
    progress_path,
    read_progress,
)
from veri_tui.jobfolder.supervise.watchdog import (
    DIST_TIMEOUT_ENV,
    DIST_TIMEOUT_S,
    FLOOR_S,
    LOAD_TIMEOUT_S,
    MARGIN_S,
    SLOW_FACTOR,
    HangWatch,
    dist_timeout_s,
)

REPO = Path(__file__).resolve().parents[2]
SPEC = {"gpu_count": 2, "nproc_per_node": 2, "hyperparameters": {"hang_timeout_s": 15}}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds


def watch(job_dir: Path, spec: dict | None = None) -> tuple[HangWatch, Clock, list[Progress]]:
    clock = Clock()
    w = HangWatch(job_dir, spec or SPEC, environ={}, clock=clock)
    w.dump_wait_s = 0  # no rank here answers dump requests: do not wait for them
    return w, clock, [Progress(job_dir, r) for r in range(2)]


def run_for(w: HangWatch, clock: Clock, seconds: float) -> dict | None:
    """Poll once a second for ``seconds``; the error as soon as one is returned."""
    for _ in range(int(seconds)):
        clock.tick(1)
        err = w.poll()
        if err is not None:
            return err
    return None


def test_progress_line_is_rewritten_in_place(tmp_path: Path) -> None:
    p = Progress(tmp_path, 3)
    p.mark("load")
    p.mark("data", 7)
    p.mark("forward")
    assert read_progress(tmp_path, 3) == (3, 7, "forward")
    raw = progress_path(tmp_path, 3).read_bytes()
    assert len(raw) == RECORD_BYTES and raw.endswith(b"\n")
    assert read_progress(tmp_path, 0) is None  # no line yet
    progress_path(tmp_path, 0).write_bytes(b"garbage")
    assert read_progress(tmp_path, 0) is None


def test_the_rank_furthest_behind_is_blamed_in_the_seed_form(tmp_path: Path) -> None:
    w, clock, (r0, r1) = watch(tmp_path)
    for p in (r0, r1):
        p.mark("load")
    assert run_for(w, clock, 100) is None  # loading: not armed
    for p in (r0, r1):
        p.mark("data", 7)
    r1.mark("forward")  # rank 1 stops in step 7's forward
    for phase in ("forward", "backward"):
        r0.mark(phase)  # rank 0 reaches the gradient all-reduce and waits there
    clock.tick(1)
    assert w.poll() is None  # the marks are read: the wait starts now
    assert run_for(w, clock, 14) is None
    err = run_for(w, clock, 1)
    assert err is not None
    assert err["summary"] == (
        "rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step 7 (forward) "
        "for 15 s; the other ranks waited in a collective"
    )
    assert (err["code"], err["attribution"]) == ("RANK_HUNG", "platform")
    assert (err["rank"], err["node"], err["local_rank"], err["world_size"]) == (1, 0, 1, 2)
    assert "rank 0: step 7 (backward)" in err["traceback"]


def test_any_advance_restarts_the_wait(tmp_path: Path) -> None:
    w, clock, (r0, r1) = watch(tmp_path)
    r0.mark("data", 1)
    r1.mark("data", 1)
    for _ in range(5):
        assert run_for(w, clock, 10) is None
        r0.mark("forward")  # slow, but moving
    assert run_for(w, clock, 20) is not None


def test_a_tie_blames_the_stopped_process(tmp_path: Path) -> None:
    w, clock, (r0, r1) = watch(tmp_path)
    for p in (r0, r1):
        p.mark("data", 4)
        p.mark("forward")
        p.mark("backward")  # both in backward: one computing, one waiting in the all-reduce
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (tmp_path / "pids").mkdir()
        write_pid(rank_pid_path(tmp_path, 0), os.getpid())
        write_pid(rank_pid_path(tmp_path, 1), sleeper.pid)
        err = run_for(w, clock, 20)
        assert err is not None and err["summary"].startswith("every rank (2) failed: ")
        assert err["rank"] is None and "none can be told from the others" in err["summary"]
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_for(lambda: " T " in Path(f"/proc/{sleeper.pid}/stat").read_text(), 5, "stop")
        err = w.error(clock.now, [])
        assert err["rank"] == 1 and err["summary"].startswith("rank 1/2 (node 0, local_rank 1)")
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_rank_that_never_reported_is_blamed_as_loading(tmp_path: Path) -> None:
    w, clock, (r0, _r1) = watch(tmp_path)
    r0.mark("data", 1)  # rank 1 never got past loading (no line at all)
    assert run_for(w, clock, 15 * SLOW_FACTOR - 2) is None  # loading waits longer
    err = run_for(w, clock, 4)
    assert err is not None and err["summary"].startswith(
        "rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step 0 (load)"
    )


def test_the_load_phase_has_its_own_timeout_from_the_newest_sign_of_life(tmp_path: Path) -> None:
    spec = {**SPEC, "hyperparameters": {"hang_timeout_s": 15, "load_timeout_s": 40}}
    w, clock, (r0, _r1) = watch(tmp_path, spec)
    # No rank has started: interpreter start-up and imports count, so 4 x the load timeout.
    assert run_for(w, clock, 4 * 40 - 2) is None
    err = run_for(w, clock, 4)
    assert err is not None and err["summary"] == (
        "every rank (2) failed: no rank advanced in the load phase for 160 s "
        "(load_timeout_s 40 s x 4); no rank of this node has started (written its pid)"
    )
    w, clock, (r0, _r1) = watch(tmp_path, spec)
    clock.tick(100)
    r0.mark("rendezvous")  # rank 0 waits to join; rank 1 never shows up
    assert run_for(w, clock, 40) is None  # the wait starts at the mark (read a second later)
    err = run_for(w, clock, 2)
    assert err is not None and err["summary"].startswith(
        "rank 1/2 (node 0, local_rank 1) failed: no rank advanced in the load phase for 40 s "
        "(load_timeout_s 40 s)"
    )
    assert "rank 0: step 0 (rendezvous)" in err["traceback"]


def test_checkpoint_and_artifact_phases_wait_longer(tmp_path: Path) -> None:
    w, clock, (r0, r1) = watch(tmp_path)
    for p in (r0, r1):
        p.mark("data", 10)
    r0.mark("checkpoint")
    assert run_for(w, clock, 15 * SLOW_FACTOR - 2) is None
    assert run_for(w, clock, 4)["summary"].startswith("rank 1/2 (node 0, local_rank 1)")


def test_default_timeout_from_floor_prediction_and_measured_steps(tmp_path: Path) -> None:
    w, clock, (r0, r1) = watch(tmp_path, {"gpu_count": 2, "step_time_s": 2.0})
    assert w.timeout_s(False) == FLOOR_S and w.timeout_s(True) == FLOOR_S * SLOW_FACTOR
    for step in range(1, 4):  # measured: 40 s per step
        for p in (r0, r1):
            p.mark("data", step)
        clock.tick(40)
        w.next_poll = 0
        assert w.poll() is None
    assert w.slowest == 40.0 and w.timeout_s(False) == 400.0
    # Never at or above the process groups' timeout: the watchdog must speak first.
    w.slowest = 10_000.0
    assert w.dist_s == LOAD_TIMEOUT_S + MARGIN_S  # above the load timeout too
    assert w.timeout_s(True) == w.dist_s - MARGIN_S
    # A plan that predicts 45 s steps starts at 450 s, the process groups' timeout above it.
    w = HangWatch(tmp_path, {"gpu_count": 2, "step_time_s": 45.0}, environ={})
    assert w.timeout_s(False) == 450.0 and w.dist_s == SLOW_FACTOR * 450 + MARGIN_S


def test_process_group_timeout_stays_above_the_watchdog() -> None:
    assert dist_timeout_s({}, {}) == LOAD_TIMEOUT_S + MARGIN_S >= DIST_TIMEOUT_S
    big = {"hyperparameters": {"hang_timeout_s": 3600}}
    assert dist_timeout_s(big, {}) == SLOW_FACTOR * 3600 + MARGIN_S
    assert dist_timeout_s(big, {DIST_TIMEOUT_ENV: "99999"}) == 99999
    slow_load = {"hyperparameters": {"hang_timeout_s": 10, "load_timeout_s": 5000}}
    assert dist_timeout_s(slow_load, {}) == 5000 + MARGIN_S  # a rendezvous waits this long
    w = HangWatch(Path("/nonexistent"), big, environ={})
    env = w.environment({"A": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    assert env["A"] == "1" and env[DIST_TIMEOUT_ENV] == str(4 * 3600 + 60)
    # The Flight Recorder and NCCL's dump on timeout are set; what the user set is kept.
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/nonexistent/forensics/nccl-trace-rank-"
    assert "TORCH_FR_BUFFER_SIZE" not in w.environment({"TORCH_NCCL_TRACE_BUFFER_SIZE": "10"})


def test_trainer_default_matches() -> None:
    parallelize = pytest.importorskip("veri_tui.trainer.parallelize")
    if not hasattr(parallelize, "DIST_TIMEOUT_S"):
        pytest.skip("this trainer sets no explicit process-group timeout")
    assert parallelize.DIST_TIMEOUT_S == DIST_TIMEOUT_S


def test_progress_marks_cost_microseconds(tmp_path: Path) -> None:
    # Not a timing assertion: the figure goes to docs/jobs.md; here only that it runs.
    p = Progress(tmp_path, 0)
    t0 = time.perf_counter()
    for i in range(20_000):
        p.mark("forward", i)
    per_mark = (time.perf_counter() - t0) / 20_000
    print(f"progress mark: {per_mark * 1e6:.1f} us")
    assert read_progress(tmp_path, 0) == (20_000, 19_999, "forward")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sigstopped_rank_1_fails_the_job_rank_hung(home: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "veri_tui", "launch", "--gpu-count", "2",
         "--set", "max_steps=100000", "--set", "max_seq_length=64",
         "--set", "hang_timeout_s=15"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    job_dir = home / "jobs" / job_id
    metrics = job_dir / "metrics.jsonl"

    def step() -> int:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        return json.loads(lines[-1])["step"] if lines else 0

    wait_for(lambda: step() >= 5, 120, "step 5 in metrics.jsonl")
    pid = read_pid(job_dir / "pids" / "rank-1")
    assert pid
    # The process group's timeout the rank got: above the watchdog's and the load timeout.
    assert b"VERI_DIST_TIMEOUT_S=1860" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    stopped_after = step()
    rec = wait_ended(job_id, timeout=120)
    took = time.monotonic() - stopped
    print(f"RANK_HUNG recorded {took:.1f} s after the SIGSTOP (hang_timeout_s=15)")
    print(rec["error"]["summary"])
    assert rec["status"] == "failed"
    err = rec["error"]
    assert (err["code"], err["attribution"], err["rank"]) == ("RANK_HUNG", "platform", 1)
    prefix = "rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step "
    assert err["summary"].startswith(prefix), err["summary"]
    # The dumps asked for before the end: rank 0's names the collective rank 1 is missing
    # from; rank 1 cannot answer, and its stack is read from the stopped process.
    assert re.search(
        r"; rank 1 is missing from \S+ #\d+ of the default group, which rank 0 entered; rank 1 "
        rf"at veri_tui/trainer/\S+:\d+ in \S+ \(its process \(pid {pid}\) is stopped "
        r"\(SIGSTOP or a "
        r"debugger\): its stack read from the process\)$",
        err["summary"],
    ), err["summary"]
    stalled = int(err["summary"].split(" for ")[1].split(" s;")[0])
    assert stalled >= 15
    assert int(err["summary"][len(prefix) :].split()[0]) >= stopped_after
    log = (job_dir / "log.txt").read_text().splitlines()
    at = log.index(err["summary"])
    assert log[at + 1].startswith("plan: dp=2") and "rank 1: step" in "\n".join(log[at:])
    text = "\n".join(log[at:])
    assert "  rank 1: no answer: its process" in text and "  rank 0: entered it" in text
    stack = text.split("    its stack, read from the stopped process:\n", 1)[1].splitlines()
    assert re.match(r"      \S+\.py:\d+ in \S+$", stack[0]), text  # its innermost frames
    # Every process of the job ended (pid files and /proc), the supervisor included.
    wait_for(lambda: not leftover_pids(job_dir), 15, "no process of the job left")
