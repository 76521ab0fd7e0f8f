"""`veri-tui launch`: validate, plan and start a job detached; print its id.

Before it starts, stderr says where the ranks will run (`device: 2 CUDA GPUs on this machine
... for the plan's 2 x H100-80GB`, or `warning: no CUDA GPU on this machine: the job runs 2
CPU processes (gloo) instead of the planned 2 x H100-80GB; ...`: veri_tui/launch/device.py).
Detached, stdout is the job id alone (for `job=$(veri-tui launch ...)`) and stderr says how
to follow, cancel and see the job. With --wait the rank-0 log is followed to the end, its
metric lines shown as the app's monitor shows them (`step 3/5  loss 5.685  lr 6.5e-04
...`: veri_tui/launch/metrics.py; `veri-tui logs JOB --json` prints them raw), and the exit
status tells the outcome (0 succeeded, 1 failed or cancelled; the last stderr line is
`job ID failed: CODE (attribution): summary`). With --json, stdout is one JSON job record
instead (the final one with --wait). Interrupting the wait leaves the job running: it is
detached, and `veri-tui cancel` ends it. With --slurm it is submitted with sbatch
(docs/slurm.md); --dry-run prints the batch script instead.

With --canary [K] the log is followed until the canary's gate has decided (its table is in
the log, docs/canary.md): go leaves the job running detached (exit 0; --wait follows it to
the end), no-go waits for its ranks to end and exits 1 with the line naming what failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from veri_tui.commands.common import hosts_of, job_from_args
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import SUCCEEDED
from veri_tui.launch import jobs
from veri_tui.launch.job_datasets import with_data
from veri_tui.launch.spec import check_job


def run(args: argparse.Namespace) -> int:
    """Run `veri-tui launch`; VeriError (bad input) propagates to the CLI's exit 2."""
    from veri_tui.plan import plan_job

    job = job_from_args(args)
    host = hosts_of(args, job)
    canary = canary_of(args)
    probe = jobs.ProbeChoice(run=not args.no_probe, allow_slow=args.allow_slow_nodes)
    if args.dry_run:
        print(jobs.dry_run(job, host, args.trust_host, probe), end="")
        return 0
    if host is None:
        check_job(job)  # every refusal at once, before the model is even read
        # Planned with the dataset it will train on (the bundled sample for a bundled model),
        # so job.json's predicted GPU-hours and price count its tokens.
        record = plan_job(with_data(job))
    else:
        # The model and --output are paths on the host (a Slurm login node's too), which
        # this machine may not have: the SSH launch checks them there and plans after its
        # preflight (the host's GPUs, the model's headers read over SFTP). Planning here
        # would refuse a model only it holds.
        record = None
    job_id = jobs.launch(job, record, host=host, trust_host=args.trust_host, probe=probe,
                         canary=canary, say=lambda line: print(line, file=sys.stderr))  # fmt: skip
    if canary is not None:
        return follow_canary(job_id, args.wait, args.json)
    if args.json:
        # One JSON object on stdout: the record now, or the final one with --wait.
        final = wait_quietly(job_id) if args.wait else jobs.get_job(job_id)
        print(json.dumps(final))
        return 0 if not args.wait or final["status"] == SUCCEEDED else 1
    print(job_id, flush=True)
    if not args.wait:
        print(how_to_follow(job_id, "started detached"), file=sys.stderr)
        return 0
    return follow_to_end(job_id)


def how_to_follow(job_id: str, what: str) -> str:
    """`job ID started detached` and the commands that follow, cancel and show it (stderr:
    stdout stays the job id alone)."""
    return (
        f"job {job_id} {what}; it runs on without this terminal:\n"
        f"  follow it:  veri-tui logs {job_id} -f\n"
        f"  cancel it:  veri-tui cancel {job_id}\n"
        f"  see it:     veri-tui jobs {job_id}   (or all jobs: veri-tui jobs; the app: veri-tui)"
    )


def canary_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The spec's `canary` from --canary K and its limits; None without --canary."""
    limits = {"max_cost": args.max_cost, "max_hours": args.max_hours, "headroom": args.headroom}
    return jobs.canary_spec(args.canary, **limits)


def follow_canary(job_id: str, wait: bool, as_json: bool) -> int:
    """Follow the log (printed unless ``as_json``) until the gate decided: go returns 0 (or
    follows to the end with ``wait``), no-go returns 1 once the job has ended."""
    if not as_json:
        print(job_id, flush=True)
    decision = None
    try:
        for line in jobs.follow_log(job_id):
            if not as_json:
                print(jobs.log_row(line.text), flush=True)
            # The gate's own line ends its table (veri_tui/jobfolder/canary/canarytable.py).
            if decision is None and line.text.startswith(("canary: go", "canary: no-go")):
                decision = (jobs.get_job(job_id).get("canary") or {}).get("decision")
                if decision == "go" and not wait:
                    break
    except KeyboardInterrupt:
        print(f"stopped following; job {job_id} keeps running (veri-tui cancel {job_id})",
              file=sys.stderr)  # fmt: skip
        return 130
    final = jobs.get_job(job_id)
    if as_json:
        print(json.dumps(final))
    if decision == "go" and not wait:
        if not as_json:
            print(how_to_follow(job_id, "goes on detached"), file=sys.stderr)
        return 0
    if final["status"] == SUCCEEDED:
        return 0
    if not as_json:
        print(outcome_line(job_id, final), file=sys.stderr)
    return 1


def follow_to_end(job_id: str, offset: int = 0) -> int:
    """Print the rank-0 log from ``offset`` until the job ends, metric lines as rows
    (`jobs.log_row`); 0 when it succeeded, else
    1 with the outcome line on stderr (130 when interrupted: the job keeps running)."""
    try:
        for line in jobs.follow_log(job_id, offset):
            print(jobs.log_row(line.text), flush=True)  # a metric line as the app's row
    except KeyboardInterrupt:
        print(f"stopped following; job {job_id} keeps running (veri-tui cancel {job_id})",
              file=sys.stderr)  # fmt: skip
        return 130
    final = jobs.get_job(job_id)
    if final["status"] == SUCCEEDED:
        return 0
    print(outcome_line(job_id, final, followed=True), file=sys.stderr)
    return 1


def outcome_line(job_id: str, record: Mapping[str, Any], followed: bool = False) -> str:
    """`job ID failed: CONFIG_ERROR (customer): rank 1/2 (...) failed: ...`: the code and
    attribution job.json gives, then its summary; `job ID cancelled` without an error.
    ``followed``: the log just printed ended with the summary of a one-line failure (a data
    error: its file and line), which is then not said again."""
    from veri_tui.jobfolder.failures.failures import ONE_LINE_CODES, TRACEBACK_FILE

    error = record.get("error") or {}
    parts = [f"job {job_id} {record['status']}"]
    if error.get("code"):
        who = error.get("attribution")
        parts.append(f"{error['code']} ({who})" if who else str(error["code"]))
    if followed and error.get("code") in ONE_LINE_CODES:
        return (
            ": ".join(parts) + f" (the line above; traceback in the job folder's {TRACEBACK_FILE})"
        )
    if error.get("summary"):
        parts.append(str(error["summary"]))
    canary = record.get("canary") or {}
    if canary.get("decision") == "no-go" and not error:
        parts.append(str(canary.get("line")))
    return ": ".join(parts)


def wait_quietly(job_id: str, offset: int = 0) -> JobRecord:
    """Follow the log without printing it until the job ends; its final record."""
    for _line in jobs.follow_log(job_id, offset):
        pass  # following is how any target (local or SSH) tells that the job has ended
    return jobs.get_job(job_id)
