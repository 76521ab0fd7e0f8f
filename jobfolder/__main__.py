"""`python -m jobfolder status|cancel|resume|checkpoints ...`: what a job's host is asked.

The launcher runs these on the host that holds the job folder (locally with this Python,
over SSH with the host's and the job's uploaded package on PYTHONPATH). Each prints one
JSON document on stdout; a refusal prints one `error: <key>: <message>` line and exits 3.

    status JOB_JSON [--pid N]         the record, lost rule applied (N: the launcher's pid)
    cancel JOB_JSON [--grace S] [--pid N]      end every process, record cancelled
    resume JOB_JSON [--choice JSON]   new attempt (the replacement spec, or null, on stdin)
    checkpoints list JOB_DIR...       {job_dir: [committed steps, newest first]}
    checkpoints verify STEP JOB_DIR...   {job_dir: "" or the first problem of step-STEP}
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from jobfolder import attempts, ckptindex
from jobfolder.control import cancel_job
from jobfolder.layout import JobLayout
from jobfolder.lost import read_status
from jobfolder.procs import GRACE_S

REFUSED = 3  # the exit status of a refusal (its one line is on stdout)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobfolder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="the job record, the lost rule applied")
    cancel = sub.add_parser("cancel", help="end every process of the job")
    resume = sub.add_parser("resume", help="make the ended job pending for a new attempt")
    for command in (status, cancel, resume):
        command.add_argument("job", type=Path, help="the job's job.json")
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
