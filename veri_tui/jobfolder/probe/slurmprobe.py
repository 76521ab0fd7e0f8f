"""The Slurm batch job's probe of its own nodes, before its training starts.

`python -m veri_tui.jobfolder.probe.slurmprobe --job <job_dir>/job.json`, a line of the batch script
(veri_tui/launch/slurm/script.py) before the supervisor: one srun task a node runs
`veri_tui.trainer.gpuhealth` and then its node's torchrun of `veri_tui.trainer.probe`
(probe_verdict.SRUN_TASK, the same programs as `veri-tui probe --slurm`), with the job's ranks per
node. What they measured is judged by the launcher's rules (probe_verdict.py) and kept in the job
folder: `probe.json` (the whole report), job.json's `probe` (the figures and the printed lines,
which `veri-tui jobs JOB` shows), log.txt, and the partition's probe cache in $VERI_HOME (where
`veri-tui plan --slurm ... --partition P --nodes N` finds the measured network).

A sick or slow node, or a probe that does not run, stops the job before training: job.json
records it failed (HARDWARE_ERROR naming the node and `--exclude`, or COMM_ERROR) and the
step exits 3, so the batch script ends without starting the supervisor. The job's
spec["slurm"]["probe"] = "allow" (`launch --allow-slow-nodes`) records and goes on.

Standard library only: this runs on the allocation's first node with the job's packages.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

from veri_tui.jobfolder.contract.atomic import modify_job, write_json_atomic
from veri_tui.jobfolder.contract.layout import CANCEL_REQUEST, JOB_FILE, LOG
from veri_tui.jobfolder.contract.record import JobRecord, job_error, now_iso, read_job
from veri_tui.jobfolder.contract.status import FAILED, has_ended
from veri_tui.jobfolder.failures.failures import append_lines
from veri_tui.jobfolder.probe import probe_verdict as verdict

#: The report's file in the job folder.
PROBE_FILE = "probe.json"
#: Seconds the whole probe may take: two Python and torch start-ups a node, a few collectives.
PROBE_TIMEOUT_S = 600.0
#: The step's exit status when it stops the job.
STOPPED_EXIT = 3
EXCLUDE = 'launch it again with --exclude {name}, or exclude = "{name}" in [slurm]'


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def srun_argv(nodes: int, ranks: int, sizes: str | None = None) -> list[str]:
    """srun running SRUN_TASK once a node of this allocation."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    extra = ["--sizes", sizes] if sizes else []
    return [
        "srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        *([f"--cpus-per-task={cpus}"] if cpus else []), "--job-name=veri-probe",
        "bash", "-c", verdict.SRUN_TASK, "veri-probe", sys.executable, str(_free_port()),
        str(ranks), *extra,
    ]  # fmt: skip


def _run(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of srun; on the timeout srun is interrupted twice (its
    way of ending the tasks) and killed."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               PYTHONUNBUFFERED="1")  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for _ in range(2):
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return 124, out, err + f"\nthe probe did not end within {PROBE_TIMEOUT_S:.0f} s"
    return proc.returncode, out, err


def measure(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str], str]:
    """(the report as probe_verdict.as_dict, its labels' refusals, why it failed: '' when it
    ran) of this allocation's nodes with the job's ranks per node."""
    nodes = int(spec.get("nnodes") or 1)
    ranks = int(spec.get("nproc_per_node") or spec.get("gpu_count") or 1)
    code, out, err = _run(srun_argv(nodes, ranks))
    records = verdict.marked(out, verdict.PROBE_MARK)
    if not records:
        tail = [ln for ln in (err or out).splitlines() if ln.strip()][-3:]
        return None, [], f"srun exit {code}: {' | '.join(tail) or 'no output'}"
    names = verdict.srun_names(out)
    labels = [names.get(str(k), f"node {k}") for k in range(nodes)]
    facts = sorted(verdict.marked(out, verdict.HEALTH_MARK), key=lambda h: int(h.get("node") or 0))
    partition = os.environ.get("SLURM_JOB_PARTITION") or (spec.get("slurm") or {}).get("partition")
    report = verdict.as_dict(f"slurm:{partition}", labels, records[0], facts, now_iso())
    refused = verdict.refusals(labels, records[0], facts, EXCLUDE)
    return report, refused, ""


def _stop(job_path: Path, code: str, message: str, world: int | None) -> None:
    """Record the job failed before training (unless a cancel or an end came first)."""

    def change(record: JobRecord) -> None:
        if has_ended(record) or (job_path.parent / CANCEL_REQUEST).exists():
            return
        record.update({"status": FAILED, "ended_at": now_iso(), "exit_code": STOPPED_EXIT,
                       "error": job_error(code, message, world)})  # fmt: skip

    modify_job(job_path, change)


def run(job_path: Path) -> int:
    """Probe, record, judge; 0 to go on, STOPPED_EXIT to stop the job."""
    job_dir = job_path.parent
    spec = cast(dict[str, Any], read_job(job_path).get("spec") or {})
    allow = (spec.get("slurm") or {}).get("probe") == "allow"
    world = spec.get("gpu_count")
    log = job_dir / LOG
    append_lines(log, ["probe: the allocation's nodes before training (docs/probe.md)"])
    report, refused, failed = measure(spec)
    if report is None:
        line = f"probe: the fleet probe of the allocation failed ({failed})"
        append_lines(log, [line])
        print(line, flush=True)
        if allow:
            return 0
        _stop(job_path, "COMM_ERROR", f"{line[7:]}; pass --no-probe to launch without it",
              world)  # fmt: skip
        return STOPPED_EXIT
    printed = verdict.lines(report["labels"], report["bandwidth"], report["health"])
    write_json_atomic(job_dir / PROBE_FILE, report)
    try:  # the partition's figure for the next plan there (`plan --slurm ... --nodes N`)
        verdict.save_cached(report)
    except OSError:
        pass  # a read-only $VERI_HOME on the node: the job's own record still has it
    lines = [*printed, *(f"probe: refused: {r}" for r in refused)]
    if refused and allow:
        lines.append("probe: going on at your own risk (--allow-slow-nodes)")
    append_lines(log, lines)
    print("\n".join(lines), flush=True)

    def keep(record: JobRecord) -> None:
        cast(dict[str, Any], record)["probe"] = verdict.summary(report, printed) | {
            "refused": refused, "where": "the Slurm allocation, before training"}  # fmt: skip

    modify_job(job_path, keep)
    if refused and not allow:
        _stop(job_path, "HARDWARE_ERROR", "the fleet probe stopped the job before training: "
              + " | ".join(refused), world)  # fmt: skip
        return STOPPED_EXIT
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m veri_tui.jobfolder.probe.slurmprobe`."""
    parser = argparse.ArgumentParser(
        prog="python -m veri_tui.jobfolder.probe.slurmprobe", description=__doc__
    )
    parser.add_argument("--job", required=True, help=f"path of the job's {JOB_FILE}")
    args = parser.parse_args(argv)
    if not os.environ.get("SLURM_JOB_ID"):
        print("error: slurmprobe: runs inside the job's Slurm allocation", file=sys.stderr)
        return 2
    return run(Path(args.job))


if __name__ == "__main__":
    sys.exit(main())
