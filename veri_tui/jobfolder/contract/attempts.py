"""A job's attempts: the record of each run of its torchrun, resume requests, platform retries.

job.json's `attempts` is a list of `Attempt`s; the top-level `status`, `error`,
`started_at`, `ended_at` and `exit_code` are the latest attempt's. An attempt begins when the
supervisor starts torchrun (`open_attempt`) and ends with its outcome (`close_attempt`).
A new attempt in the same folder comes from `veri-tui resume` (`prepare_resume`: the job goes
back to `pending`, and a new supervisor starts it) or from the supervisor itself after a
platform failure when `max_restarts` allows (`retryable`). `credited_gpu_s` sums, over the
attempts that failed for the platform, wall time x GPUs: the seed credits platform failures
back. Before an attempt the previous one's per-attempt files move to `attempts/<n>/`, so the
failure report of the new attempt reads only its own records.

Every change to job.json here runs inside `atomic.modify_job` (under the job lock).
Stdlib only, like the whole jobfolder package.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.atomic import modify_job, write_text_atomic
from veri_tui.jobfolder.contract.layout import (
    CANCEL_REQUEST,
    FAILURES,
    METRICS,
    PEER_FAILED,
    PER_ATTEMPT,
    SUPERVISOR_PID,
    TORCHRUN_PID,
    JobLayout,
)
from veri_tui.jobfolder.contract.procs import end_processes, job_processes, pid_alive, read_pid
from veri_tui.jobfolder.contract.record import (
    Attempt,
    JobError,
    JobRecord,
    JobSpec,
    ResumeChoice,
    epoch_of,
    job_error,
    now_iso,
)
from veri_tui.jobfolder.contract.status import (
    FAILED,
    PENDING,
    RETRY_CODES,
    RUNNING,
    SUCCEEDED,
    Attribution,
    FailureCode,
    attribution_of,
    has_ended,
)


class ResumeRefused(ValueError):
    """A resume that cannot be done; ``key`` and ``message`` make the `error:` line."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"error: {key}: {message}")
        self.key, self.message = key, message


def attempts_of(record: JobRecord) -> list[Attempt]:
    """The record's attempts; a job that ran before attempts were recorded counts as one."""
    found = record.get("attempts")
    if found:
        return found
    if not record.get("started_at"):
        return []
    return [
        {
            "attempt": 1,
            "started_at": record.get("started_at"),
            "ended_at": record.get("ended_at"),
            "status": record.get("status", FAILED),
            "error": record.get("error"),
            "resumed_from_step": None,
            "gpu_count": int((record.get("spec") or {}).get("gpu_count") or 1),
        }
    ]


def open_attempt(record: JobRecord, resumed_from_step: int | None, retry: bool = False) -> None:
    """Append the next attempt to ``record`` (running now) and make it the top level's;
    ``retry``: a multi-node launcher started it after a platform failure (marked, so the
    retries since the last start can be counted). Returns None, so
    `modify_job(path, lambda r: open_attempt(r, s))` edits in place."""
    attempts = attempts_of(record)
    attempt: Attempt = {
        "attempt": len(attempts) + 1,
        "started_at": now_iso(),
        "ended_at": None,
        "status": RUNNING,
        "error": None,
        "resumed_from_step": resumed_from_step,
        "gpu_count": int((record.get("spec") or {}).get("gpu_count") or 1),
        "started_s": round(time.time(), 3),
    }
    if retry:
        attempt["retry"] = True
    record["attempts"] = attempts + [attempt]
    record.update(
        {
            "status": RUNNING,
            "started_at": attempt["started_at"],
            "ended_at": None,
            "error": None,
        }
    )
    record.pop("exit_code", None)


def is_platform_failure(status: str, error: JobError | None) -> bool:
    """A failed attempt whose error the platform owns (its GPU time is credited back)."""
    code = (error or {}).get("code")
    return status == FAILED and attribution_of(code) == Attribution.PLATFORM


def close_attempt(
    record: JobRecord, status: str, error: JobError | None, exit_code: int | None
) -> None:
    """End the latest attempt with its outcome, copy it to the top level, and credit its
    GPU time when the platform failed it. The job's status is the attempt's."""
    attempts = attempts_of(record)
    if not attempts:  # cancelled or lost before any attempt began
        record.update({"status": status, "ended_at": now_iso(), "error": error})
        return
    last = attempts[-1]
    ended = time.time()
    started = last.get("started_s") or epoch_of(last.get("started_at")) or ended
    last.update({"status": status, "ended_at": now_iso(), "error": error})
    last["wall_s"] = round(max(0.0, ended - float(started)), 1)
    record["attempts"] = attempts
    record.update({"status": status, "ended_at": last["ended_at"], "error": error})
    if exit_code is not None:
        record["exit_code"] = exit_code
    record["credited_gpu_s"] = credited_gpu_s(attempts)


def credited_gpu_s(attempts: list[Attempt]) -> float:
    """GPU-seconds lost to platform failures: (ended - started) x gpu_count, summed."""
    total = 0.0
    for a in attempts:
        if is_platform_failure(str(a.get("status")), a.get("error")):
            total += float(a.get("wall_s") or 0.0) * int(a.get("gpu_count") or 1)
    return round(total, 1)


def retryable(error: JobError | None) -> bool:
    """True for a platform failure the supervisor may restart by itself."""
    err = error or {}
    return err.get("code") in RETRY_CODES and err.get("attribution") == Attribution.PLATFORM


def max_restarts(spec: Mapping[str, Any], alone: bool = True) -> int:
    """The `max_restarts` knob of the job's hyperparameters (default 0). A multi-node job
    (`nnodes` > 1) is not restarted by one node's supervisor ``alone``: 0 there; its
    launcher asks with ``alone=False`` and restarts every node together."""
    if alone and int(spec.get("nnodes") or 1) > 1:
        return 0
    try:
        return max(0, int((spec.get("hyperparameters") or {}).get("max_restarts") or 0))
    except (TypeError, ValueError):
        return 0


def archive_attempt(job_dir: Path, attempt: int) -> None:
    """Move attempt ``attempt``'s own files (PER_ATTEMPT) to `attempts/<attempt>/`."""
    dest = JobLayout(Path(job_dir)).attempt_archive(attempt)
    dest.mkdir(parents=True, exist_ok=True)
    for name in PER_ATTEMPT:
        src = Path(job_dir) / name
        if src.exists():
            target = dest / name
            if target.exists():  # an attempt archived twice (a resume of a resume): keep both
                target = dest / f"{name}.{int(time.time())}"
            os.replace(src, target)
    (Path(job_dir) / FAILURES).mkdir(exist_ok=True)


def remove_stale(paths: list[Path]) -> None:
    """Remove partial-write folders (ckptindex.stale_writes); missing ones are fine."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def rewind_metrics(job_dir: Path, step: int) -> None:
    """Keep the metric lines of steps up to ``step`` (0: none), so a step run again by the
    new attempt appears once in metrics.jsonl; log.txt keeps the whole history."""
    path = Path(job_dir) / METRICS
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line).get("step", 0)) <= step:
                kept.append(line + "\n")
        except (ValueError, TypeError, AttributeError):
            continue  # a torn last line of a killed rank
    write_text_atomic(path, "".join(kept))


def resume_refusal(record: JobRecord, supervisor_alive: bool) -> ResumeRefused | None:
    """Why ``record``'s job cannot be resumed, or None: it succeeded, or it still runs
    (pending or running with its supervisor alive)."""
    job_id, status = record.get("job_id", "the job"), record.get("status")
    if status == SUCCEEDED:
        out = record.get("spec", {}).get("output_dir")
        return ResumeRefused(
            "job",
            f"{job_id} already succeeded (its artifact: {out}); there is nothing to resume",
        )
    if not has_ended(record) and supervisor_alive:
        return ResumeRefused(
            "job",
            f"{job_id} is {status}; wait for it to end, or `veri-tui cancel {job_id}` first",
        )
    return None


def prepare_resume(
    job_path: Path, spec: JobSpec | None = None, choice: ResumeChoice | None = None
) -> JobRecord:
    """Make an ended (failed or cancelled) job `pending` for a new attempt in its folder;
    ``spec`` replaces its spec (a re-plan). The caller then starts a supervisor.

    ``choice`` (a multi-node job's launcher): `resume_choice`, the step the new attempt
    starts from (`step`, None for scratch), how to say it (`where`, `lines`), `retry`, and
    `after_attempt`: refused unless the job has exactly that many attempts (another
    watcher resumed it first).

    Refused (ResumeRefused) while the job runs, and for a succeeded job. A job whose
    supervisor vanished (lost) has its leftover processes ended and its open attempt
    recorded failed first.
    """
    job_path = Path(job_path)
    job_dir = job_path.parent
    sup = read_pid(job_dir / SUPERVISOR_PID)
    alive = bool(sup) and pid_alive(int(sup or 0))
    if not alive and job_processes(job_path):
        end_processes(job_path, grace=2.0)  # ranks a lost supervisor left running

    def change(record: JobRecord) -> None:
        refused = resume_refusal(record, alive)
        if refused is not None:
            raise refused
        expected = (choice or {}).get("after_attempt")
        if expected is not None and len(attempts_of(record)) != expected:
            raise ResumeRefused("job", f"{record.get('job_id')} was resumed meanwhile")
        if not has_ended(record):
            close_lost(record, job_dir)
        if spec is not None:
            record["spec"] = spec
            record["resolved_parallelism"] = dict(spec.get("resolved_parallelism") or {})
        record["attempts"] = attempts_of(record)
        record.update({"status": PENDING, "resumed_at": now_iso(), "ended_at": None})
        if choice is not None:
            record["resume_choice"] = choice
        else:
            record.pop("resume_choice", None)
        # A dead pid would read as lost; an old cancel's marker would cancel the new attempt,
        # an old peer's failure would fail it.
        for name in (SUPERVISOR_PID, TORCHRUN_PID, CANCEL_REQUEST, PEER_FAILED):
            try:
                os.unlink(job_dir / name)
            except FileNotFoundError:
                pass

    return modify_job(job_path, change)


def close_lost(
    record: JobRecord,
    job_dir: Path,
    code: str = FailureCode.RANK_LOST,
    msg: str = "job lost: its supervisor is gone without recording an outcome",
) -> None:
    """Record the open attempt of a job whose supervisor died: failed, ``code``; it ended,
    as far as anyone can tell, when its log was last written."""
    world = (record.get("spec") or {}).get("gpu_count")
    close_attempt(record, FAILED, job_error(code, msg, world, summary=msg), None)
    attempts = record.get("attempts") or []
    try:
        last_sign = max(p.stat().st_mtime for p in job_dir.glob("*.txt"))
    except ValueError:
        return
    if attempts and attempts[-1].get("started_s"):
        attempts[-1]["wall_s"] = round(max(0.0, last_sign - attempts[-1]["started_s"]), 1)
        record["credited_gpu_s"] = credited_gpu_s(attempts)
