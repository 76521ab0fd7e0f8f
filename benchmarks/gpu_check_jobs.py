"""The GPU check's jobs: each run through the project's own supervisor, with a deadline.

A run that overruns is cancelled the supervisor's way (SIGTERM: it ends torchrun and every rank),
then anything of the job still alive is found by its command line in /proc and killed. A run with a
`fault` fails its first attempt on it and is resumed the supervisor's way
(veri_tui.jobfolder.contract.attempts.prepare_resume). Stdlib only apart from the trainer it starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_check_files import importable

REPO = Path(__file__).resolve().parents[1]
SITE_ENV: dict[str, str] = {}  # the jobs' PYTHONPATH once carried wheels are unpacked


def stop_job(proc: subprocess.Popen, job: Path) -> list[int]:
    """End the supervisor, torchrun and every rank of `job`; returns pids still alive."""
    from veri_tui.jobfolder.contract.procs import GRACE_S, end_processes, job_processes

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the supervisor's cancel: every rank, then SIGKILL
        try:
            proc.wait(GRACE_S + 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun, should the supervisor have died first
    except (ProcessLookupError, PermissionError):
        pass
    end_processes(job, grace=2.0)  # ranks sit in sessions of their own: found via /proc
    return job_processes(job)


def run_job(job: Path, timeout: float, env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Supervise one job with a deadline; the raw outcome (status, metrics, measurements)."""
    env = {**os.environ, "VERI_MEASURE_STATES": "1", "PYTHONPATH": str(REPO), **(env_extra or {})}
    cmd = [sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(job)]
    t0 = time.monotonic()
    with open(job.parent / "supervisor.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    timed_out, left = False, []
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None or timed_out:
            left = stop_job(proc, job)  # also on SIGTERM from the outer timeout
    record = json.loads(job.read_text())
    metrics_path = job.parent / "metrics.jsonl"
    lines = metrics_path.read_text().splitlines() if metrics_path.exists() else []
    measured = job.parent / "measured" / "rank-0.json"
    attempts = record.get("attempts") or []
    return {
        "status": "timeout" if timed_out else record.get("status"),
        "timeout_s": round(timeout, 1), "wall_s": round(time.monotonic() - t0, 1),
        "left_running": left, "exit_code": record.get("exit_code"),
        "error": record.get("error"), "metrics": [json.loads(x) for x in lines if x.strip()],
        "states_measured": json.loads(measured.read_text()) if measured.exists() else None,
        "job_measured": record.get("measured"),
        "attempts": [{k: a.get(k) for k in ("attempt", "status", "resumed_from_step")}
                     | {"code": (a.get("error") or {}).get("code")} for a in attempts],
    }  # fmt: skip


def run_feature(job: Path, expected: dict[str, Any], timeout: float) -> dict[str, Any]:
    """A run; with a `fault`, a first attempt that fails on it, then the supervisor's resume
    (veri_tui.jobfolder.contract.attempts.prepare_resume: a new attempt from the newest verified
    checkpoint) in the time left."""
    t0 = time.monotonic()
    if not expected.get("fault"):
        return run_job(job, timeout, SITE_ENV)
    first = run_job(job, timeout, {**SITE_ENV, "VERI_FAULT": expected["fault"]})
    if first["status"] != "failed":
        return {**first, "status": f"first attempt {first['status']}, not failed as injected"}
    from veri_tui.jobfolder.contract.attempts import prepare_resume

    prepare_resume(job)
    second = run_job(job, max(timeout - (time.monotonic() - t0), 1.0), SITE_ENV)
    second["first_attempt"] = {"status": first["status"],
                               "code": (first.get("error") or {}).get("code")}  # fmt: skip
    second["wall_s"] = round(time.monotonic() - t0, 1)
    return second


def missing(expected: dict[str, Any]) -> str | None:
    """Why a run that needs a module (QLoRA: bitsandbytes) cannot be judged here, or None:
    a status starting "not judged" (gpu_check_report.NOT_JUDGED), which fails nothing."""
    module = expected.get("needs")
    if not module:
        return None
    ok, why = importable(module, SITE_ENV.get("PYTHONPATH", str(REPO)))
    if ok:
        return None
    carried = "no wheel carried: --prepare fetches it where a registry answers"
    return f"not judged: {module} does not import here ({why or carried})"
