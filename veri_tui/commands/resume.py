"""`veri-tui resume JOB`: a new attempt of a failed or cancelled job, in its own folder.

The supervisor starts the attempt from the newest checkpoint whose manifest verifies (the
log says `resume: attempt N from step-S (verified)`, and names any corrupt step it skipped),
with the job's plan, or a new one for `--gpu-count N` / `--set KEY=VALUE` (the global batch
is kept), or for a Slurm job `--nodes N` (its one global checkpoint, in the folder every
node shares, is resharded over the new layout). It prints `job ID resumed: attempt N`;
and on stderr how to follow, cancel and see it; with --wait it follows the log from where it
stood (metric lines as rows) and exits as `launch --wait` does (0
succeeded, 1 otherwise, with the outcome line on stderr); --json prints the job record
instead (the final one with --wait). A running or succeeded job is refused: one
`error: job: ...` line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from veri_tui.commands.launch import follow_to_end, how_to_follow, wait_quietly
from veri_tui.jobfolder.contract.attempts import attempts_of
from veri_tui.jobfolder.contract.status import SUCCEEDED
from veri_tui.launch import jobs


def run(args: argparse.Namespace) -> int:
    """Run `veri-tui resume`; VeriError (bad input) propagates to the CLI's exit 2."""
    job_id = args.job
    offset = len(jobs.read_log(job_id, 0))  # follow only what the new attempt writes
    record = jobs.resume(job_id, gpu_count=args.gpu_count, sets=args.sets, nodes=args.nodes)
    attempt = len(attempts_of(record)) + 1
    if args.json:
        final = wait_quietly(job_id, offset) if args.wait else jobs.get_job(job_id)
        print(json.dumps(final))
        return 0 if not args.wait or final["status"] == SUCCEEDED else 1
    print(f"job {job_id} resumed: attempt {attempt}", flush=True)
    if not args.wait:
        print(how_to_follow(job_id, f"attempt {attempt} started detached"), file=sys.stderr)
        return 0
    return follow_to_end(job_id, offset)
