"""`python -m veri_tui.jobfolder status|cancel|resume|close|set-scheduler|checkpoints`: what a
host is asked about a job.

A cancel asks the supervisor first (SIGTERM: it ends torchrun and every rank and records
`cancelled`); when it is gone, or does not finish in time, the job's processes are ended
here (SIGTERM, SIGKILL after the grace) and the cancel recorded (`cancel_job`).

The launcher runs these on the host that holds the job folder (locally with this Python,
over SSH with the host's and the job's uploaded package on PYTHONPATH). Each prints one
JSON document on stdout; a refusal prints one `error: <key>: <message>` line and exits 3.

    status JOB_JSON [--pid N]         the record, lost rule applied (N: the launcher's pid)
    cancel JOB_JSON [--grace S] [--pid N]      end every process, record cancelled
    resume JOB_JSON [--choice JSON]   new attempt (the replacement spec, or null, on stdin)
    close JOB_JSON --status S [--error JSON]   record the outcome a scheduler reported
                                      (nothing when one is recorded already)
    set-scheduler JOB_JSON NAME ID    the job's scheduler and its id there (`scheduler`):
                                      what sbatch answered
    checkpoints list JOB_DIR...       {job_dir: [committed steps, newest first]}
    checkpoints verify STEP JOB_DIR...   {job_dir: "" or the first problem of step-STEP}
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from veri_tui.jobfolder.contract import attempts, ckptindex
from veri_tui.jobfolder.contract.atomic import record_cancel, update_job
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.jobfolder.contract.lost import close_job, read_status
from veri_tui.jobfolder.contract.procs import (
    GRACE_S,
    end_processes,
    job_processes,
    pid_alive,
    read_pid,
)
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import ENDED, has_ended, is_lost, outcome_recorded

REFUSED = 3  # the exit status of a refusal (its one line is on stdout)


#: How long past the grace a cancelled supervisor gets to record its own outcome.
SUPERVISOR_SLACK_S = 3.0


def cancel_job(
    job_path: Path, grace: float = GRACE_S, fallback_pid: int | None = None
) -> JobRecord:
    """End every process of the job (SIGTERM, SIGKILL after ``grace``); status cancelled,
    unless it had already ended. ``fallback_pid``: the supervisor pid its launcher saw."""
    record = read_status(job_path, fallback_pid)
    if has_ended(record) and not (is_lost(record) and job_processes(job_path)):
        return record  # ended already (a lost job is swept only while ranks survive it)
    sup = read_pid(JobLayout(job_path.parent).supervisor_pid) or fallback_pid
    if sup and pid_alive(sup):
        os.kill(sup, signal.SIGTERM)
        deadline = time.monotonic() + grace + SUPERVISOR_SLACK_S
        while time.monotonic() < deadline and pid_alive(sup):
            time.sleep(0.1)
    record = read_status(job_path, fallback_pid)
    if outcome_recorded(record) and not job_processes(job_path):
        return record
    if sup and pid_alive(sup):
        os.kill(sup, signal.SIGKILL)
    end_processes(job_path, grace=min(grace, 2.0))
    return record_cancel(job_path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m veri_tui.jobfolder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="the job record, the lost rule applied")
    cancel = sub.add_parser("cancel", help="end every process of the job")
    resume = sub.add_parser("resume", help="make the ended job pending for a new attempt")
    close = sub.add_parser("close", help="record the outcome a scheduler reported")
    scheduled = sub.add_parser("set-scheduler", help="the job's scheduler and its id there")
    for command in (status, cancel, resume, close, scheduled):
        command.add_argument("job", type=Path, help="the job's job.json")
    close.add_argument("--status", required=True, choices=[str(s) for s in ENDED])
    close.add_argument("--error", help="the job's error (JSON), or none")
    scheduled.add_argument("name", help="the scheduler (its backend's name: slurm)")
    scheduled.add_argument("id", help="the job's id there (what sbatch --parsable answered)")
    for command in (status, cancel):
        command.add_argument("--pid", type=int, help="the supervisor pid seen at its start")
    cancel.add_argument("--grace", type=float, default=GRACE_S, help="SIGTERM to SIGKILL, s")
    resume.add_argument("--choice", help="a multi-node job's resume_choice (JSON)")
    ckpt = sub.add_parser("checkpoints", help="committed checkpoints, and their verification")
    ckpt.add_argument("mode", choices=("list", "verify"))
    ckpt.add_argument("args", nargs="+", help="[STEP] JOB_DIR...")
    return parser


def checkpoints(mode: str, args: list[str]) -> dict[str, object]:
    """`list`: each folder's committed steps, newest first; `verify STEP`: each folder's first
    problem with its step-STEP ("" when sound)."""
    out: dict[str, object] = {}
    step, folders = (args[0], args[1:]) if mode == "verify" else ("", args)
    for folder in folders:
        root = JobLayout(Path(folder)).checkpoints
        if mode == "list":
            out[folder] = [n for n, _ in ckptindex.committed(root)]
            continue
        found = ckptindex.problems(root / f"step-{step}")
        more = f" (and {len(found) - 1} more)" if found[1:] else ""
        out[folder] = found[0] + more if found else ""
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "checkpoints":
        print(json.dumps(checkpoints(args.mode, args.args)))
        return 0
    job = args.job.resolve()
    if args.command == "status":
        print(json.dumps(read_status(job, args.pid)))
    elif args.command == "cancel":
        print(json.dumps(cancel_job(job, args.grace, args.pid)))
    elif args.command == "close":
        error = json.loads(args.error) if args.error else None
        print(json.dumps(close_job(job, args.status, error)))
    elif args.command == "set-scheduler":
        print(json.dumps(update_job(job, scheduler={"name": args.name, "id": args.id})))
    else:
        spec = json.loads(sys.stdin.read() or "null")
        choice = json.loads(args.choice) if args.choice else None
        try:
            record = attempts.prepare_resume(job, spec, choice)
        except attempts.ResumeRefused as exc:
            print(exc)
            return REFUSED
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
