"""`veri-tui jobs`, `veri-tui logs JOB [-f] [--json]` and `veri-tui cancel JOB`.

`logs` shows the trainer's metric lines as the app's monitor does (`step 3/5  loss 5.685
lr 6.5e-04  grad 2.47  820 tok/s  mem 394.9 MB`); `--json` prints the log as written.

All three read the job folder through the launch facade, so they work from any process at any
time after launch (the CLI that launched a job may be long gone). An unknown job id is a
VeriError: one `error: job: ...` line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, cast

from veri_tui.errors import VeriError
from veri_tui.jobfolder.canary.canarytable import no_go_line
from veri_tui.jobfolder.contract.record import NOT_RECORDED, JobRecord, plan_line_of
from veri_tui.jobfolder.contract.status import Attribution, FailureCode, has_ended, outcome_recorded
from veri_tui.launch import jobs


def run(args: argparse.Namespace) -> int:
    """Dispatch on args.command: jobs, logs or cancel."""
    if args.command == "jobs":
        if getattr(args, "job", None):
            return show_job(args.job, args.json)
        return list_jobs(args.json)
    if args.command == "logs":
        return show_log(args.job, args.follow, raw=args.json)
    return cancel(args.job)


def _row(rec: JobRecord) -> list[str]:
    spec = rec.get("spec") or {}
    error = rec.get("error") or {}
    model = os.path.basename(str(spec.get("model") or "").rstrip("/")) or "-"
    waiting = jobs.pending_reason(rec)  # a Slurm job in the queue: why it waits
    return [
        rec.get("job_id", "?"),
        f"{rec.get('status', '?')} ({waiting})" if waiting else rec.get("status", "?"),
        rec.get("host") or "local",
        str(spec.get("method", "-")),
        f"{spec.get('gpu_count', '?')}x {spec.get('gpu', '?')}",
        model,
        error.get("code", "") or ("canary no-go" if no_go_line(rec) else ""),
    ]


def list_jobs(as_json: bool) -> int:
    """Print every job, newest first: a table, or one JSON list of job records."""
    records = jobs.list_jobs(settle=True)  # what it shows is kept (launch/settle.py)
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

    with jobs.open(job_id) as job:
        rec = job.poll()  # read, and what it shows kept (launch/settle.py)
    if as_json:
        print(json.dumps(rec, indent=2))
        return 0
    print("  ".join(c for c in _row(rec) if c))
    if rec.get("error"):
        print(failure_line(rec))
    elif no_go_line(rec):
        print(no_go_line(rec))
    scheduler = jobs.scheduler_of(rec) or {}
    if scheduler.get("state"):  # what its scheduler says now: `slurm: job 12 PENDING, ...`
        why = f", reason {scheduler['reason']}" if scheduler.get("reason") else ""
        print(f"{scheduler['name']}: job {scheduler['id']} {scheduler['state']}{why}")
    print(plan_line_of(rec.get("spec"), NOT_RECORDED))
    if probe := probe_lines(rec):
        print("\n".join(probe))
    measured = comparison_lines(rec)
    print("\n".join(measured or ["measured: not recorded for this job"]))
    evals = eval_line(job_id)
    if evals:
        print(evals)
    print("\n".join(gpu_hours_lines(rec)))
    watcher = jobs.watcher_of(job_id)
    if watcher is not None:
        print(
            f"watcher: pid {watcher} on this machine ends the other nodes of a failed node "
            f"and restarts platform failures (max_restarts); `veri-tui cancel {job_id}` "
            "stops it with the job"
        )
    return 0


def probe_lines(rec: JobRecord) -> list[str]:
    """The fleet probe that cleared (or stopped) the job: when and where it ran, its printed
    figures, each node it refused (docs/probe.md); none when the job was not probed."""
    probe = cast("dict[str, Any]", rec).get("probe")
    if not isinstance(probe, dict):
        return []
    where = f" ({probe['where']})" if probe.get("where") else ""
    head = f"probe: measured {probe.get('measured_at')}{where}:"
    refused = [f"  refused: {r}" for r in probe.get("refused") or ()]
    return [head, *(f"  {line}" for line in probe.get("lines") or ()), *refused]


def failure_line(rec: JobRecord) -> str:
    """`error: RANK_LOST (platform): rank 1/2 (node 1, local_rank 0) failed: ...; node 1 is
    n1`: the code, whose fault, which rank on which node failed and why (what --json holds)."""
    error = rec.get("error") or {}
    who = error.get("attribution") or Attribution.PENDING
    text = str(error.get("summary") or error.get("message") or "").strip()
    rank, world, node = error.get("rank"), error.get("world_size"), error.get("node")
    if rank is not None and not text.startswith("rank "):
        where = f"node {node}, local_rank {error.get('local_rank')}" if node is not None else ""
        text = f"rank {rank}/{world or '?'}{f' ({where})' if where else ''}: {text}"
    hosts = [n.get("host") for n in rec.get("nodes") or []]
    if isinstance(node, int) and 0 <= node < len(hosts) and hosts[node]:
        text += f"; node {node} is {hosts[node]}"
    return f"error: {error.get('code') or FailureCode.UNKNOWN} ({who}): {text}"


def _seconds_between(start: str | None, end: str | None) -> float | None:
    from datetime import datetime

    try:
        return (
            datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))
        ).total_seconds()
    except ValueError:
        return None


def actual_gpu_s(rec: JobRecord) -> float | None:
    """GPU-seconds the job held: (ended_at - started_at) x gpu_count, summed over its attempts
    (a resumed or retried job ran more than once); None until it has ended."""
    if not has_ended(rec):
        return None
    gpus = int((rec.get("spec") or {}).get("gpu_count") or 1)
    attempts = [a for a in rec.get("attempts") or [] if a.get("wall_s") is not None]
    if attempts:
        return sum(float(a["wall_s"]) * int(a.get("gpu_count") or gpus) for a in attempts)
    wall = _seconds_between(rec.get("started_at"), rec.get("ended_at"))
    return None if wall is None else max(0.0, wall) * gpus


def gpu_hours_lines(rec: JobRecord) -> list[str]:
    """Predicted against actual GPU-hours, and what platform failures credit back."""
    from veri_tui.plan.cost import gpu_hours_text, money_text

    predicted = (rec.get("predicted") or {}).get("gpu_hours")
    price = (rec.get("predicted") or {}).get("price")
    actual = actual_gpu_s(rec)
    shown = gpu_hours_text(predicted) if predicted is not None else "- (no cost estimate)"
    if predicted is not None and price is not None:
        shown += f" ({money_text(price)})"
    line = f"gpu-hours: predicted {shown}, actual "
    if actual is None:
        line += "- (the job has not ended)" if not has_ended(rec) else "- (no start time)"
    else:
        line += f"{gpu_hours_text(actual / 3600)} = (ended_at - started_at) x gpu_count"
        if predicted:
            line += f" ({actual / 3600 / predicted:,.3g}x the prediction)"
    lines = [line]
    credited = rec.get("credited_gpu_s")
    if credited:
        lines.append(
            f"credited: {gpu_hours_text(credited / 3600)} GPU-hours ({credited:,.1f} GPU-s "
            "lost to platform failures, not charged)"
        )
    return lines


def show_log(job_id: str, follow: bool, raw: bool = False) -> int:
    """Print the rank-0 log, metric lines as the app's rows (`jobs.log_row`) unless ``raw``
    (the JSON lines as the trainer wrote them); with follow, keep printing complete lines
    until the job ends."""
    if not follow:
        data = jobs.read_log(job_id, 0)
        if raw:
            sys.stdout.buffer.write(data)
        else:
            text = data.decode("utf-8", "replace")
            *complete, last = text.split("\n")  # a last line still being written: as is
            rows = [jobs.log_row(line) + "\n" for line in complete]
            sys.stdout.write("".join(rows) + last)
        sys.stdout.flush()
        return 0
    for line in jobs.follow_log(job_id):
        print(line.text if raw else jobs.log_row(line.text), flush=True)
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


def eval_line(job_id: str) -> str | None:
    """`eval_loss: 1.734 at step 6/6 (train loss 1.52; 3 evals: 2.41, 1.98, 1.73)` from
    the job's metric lines; None when it logged no eval_loss (or its log cannot be read)."""
    from veri_tui.launch.metrics import metric_of

    try:
        text = jobs.read_log(job_id).decode("utf-8", "replace")
    except (OSError, VeriError):
        return None
    found = [m for ln in text.splitlines() if (m := metric_of(ln)) and "eval_loss" in m]
    if not found:
        return None
    last = found[-1]
    shown = ", ".join(f"{m['eval_loss']:.4g}" for m in found[-5:])
    more = "..., " if len(found) > 5 else ""
    return (f"eval_loss: {last['eval_loss']:.4g} at step {last['step']}/{last.get('total_steps')} "
            f"(train loss {last['loss']:.4g}; {len(found)} evals: {more}{shown})")  # fmt: skip
