"""`veri-tui jobs`, `veri-tui logs JOB [-f]` and `veri-tui cancel JOB`.

All three read the job folder through the launch facade, so they work from any process at any
time after launch (the CLI that launched a job may be long gone). An unknown job id is a
VeriError: one `error: job: ...` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.jobdir import JobRecord, outcome_recorded
from veri_tui.launch import jobs


def run(args: argparse.Namespace) -> int:
    """Dispatch on args.command: jobs, logs or cancel."""
    if args.command == "jobs":
        if getattr(args, "job", None):
            return show_job(args.job, args.json)
        return list_jobs(args.json)
    if args.command == "logs":
        return show_log(args.job, args.follow)
    return cancel(args.job)


def _row(rec: JobRecord) -> list[str]:
    spec = rec.get("spec") or {}
    error = rec.get("error") or {}
    model = os.path.basename(str(spec.get("model") or "").rstrip("/")) or "-"
    return [
        rec.get("job_id", "?"),
        rec.get("status", "?"),
        rec.get("host") or "local",
        str(spec.get("method", "-")),
        f"{spec.get('gpu_count', '?')}x {spec.get('gpu', '?')}",
        model,
        error.get("code", ""),
    ]


def list_jobs(as_json: bool) -> int:
    """Print every job, newest first: a table, or one JSON list of job records."""
    records = jobs.list_jobs()
    if as_json:
        print(json.dumps(records, indent=2))
        return 0
    if not records:
        print("no jobs yet; start one with `veri-tui launch`")
        return 0
    rows = [["JOB", "STATUS", "HOST", "METHOD", "GPUS", "MODEL", "ERROR"]]
    rows += [_row(r) for r in records]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def show_job(job_id: str, as_json: bool) -> int:
    """One job: its row, plan line, and what it measured beside what its plan predicted."""
    from veri_tui.launch.measured import comparison_lines

    rec = jobs.get_job(job_id)
    if as_json:
        print(json.dumps(rec, indent=2))
        return 0
    print("  ".join(c for c in _row(rec) if c))
    header = (rec.get("spec") or {}).get("plan_header") or []
    print(next((h for h in header if h.startswith("plan:")), "plan: (not recorded)"))
    print("\n".join(comparison_lines(rec) or ["measured: not recorded for this job"]))
    return 0


def show_log(job_id: str, follow: bool) -> int:
    """Print the rank-0 log; with follow, keep printing complete lines until the job ends."""
    if not follow:
        sys.stdout.buffer.write(jobs.read_log(job_id, 0))
        sys.stdout.flush()
        return 0
    for line in jobs.follow_log(job_id):
        print(line.text, flush=True)
    return 0


def cancel(job_id: str) -> int:
    """End every rank of the job and report how it ended."""
    before = jobs.get_job(job_id)
    final = jobs.cancel(job_id)
    # A lost job (its supervisor gone, maybe its ranks not) reads as failed, but the cancel
    # is what ends it: only a recorded outcome means it had already ended.
    if outcome_recorded(before):
        print(f"job {job_id} had already ended: {final['status']}")
    else:
        print(f"job {job_id} {final['status']}")
    return 0
