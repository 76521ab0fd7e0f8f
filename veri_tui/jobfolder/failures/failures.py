"""Turn what a failed torchrun left behind into one failure report naming the first failing rank.

Three sources, most precise first (docs/interfaces.md section 2, field notes "torchrun and
failures"), read by failure_sources.py: the trainer's own per-rank records, torch elastic's
error.json files, and torchrun's failure summary (the only trace of a rank killed by a
signal).

Ranks that failed only because a peer died (gloo/nccl "Connection closed", timeouts, or the
SIGTERM torchrun itself sent while shutting the group down) are demoted, so the report blames
the rank that started it. Codes come from the one table of rules in failure_rules.py, which the
ranks use too. A rank killed by SIGKILL while memory was near full gets the host
out-of-memory hint of hostmem.py. Stdlib only: this runs in the supervisor, which never
imports torch.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from veri_tui.jobfolder.contract.layout import ELASTIC, TORCHRUN_LOG
from veri_tui.jobfolder.contract.record import JobError, job_error
from veri_tui.jobfolder.contract.status import FailureCode
from veri_tui.jobfolder.contract.stopping import PeerFailed
from veri_tui.jobfolder.failures.failure_sources import (
    Candidate,
    elastic_records,
    summary_records,
    trainer_records,
)
from veri_tui.jobfolder.failures.hostmem import MemoryWatch

__all__ = [
    "Candidate",
    "analyze",
    "append_lines",
    "append_report",
    "elastic_records",
    "first_failure",
    "peer_error",
    "summary_records",
    "trainer_records",
]


def first_failure(candidates: list[Candidate]) -> Candidate | None:
    """One candidate per rank (the most precise source wins), then the earliest non-peer one."""
    by_rank: dict[int, Candidate] = {}
    for cand in candidates:  # callers pass the most precise source first
        if cand.rank in by_rank:
            kept = by_rank[cand.rank]
            if not kept.traceback and cand.traceback:
                kept.traceback = cand.traceback
            continue
        by_rank[cand.rank] = cand
    ranked = sorted(by_rank.values(), key=Candidate.sort_key)
    causes = [c for c in ranked if not c.peer]
    found = causes or ranked
    return found[0] if found else None


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


def analyze(
    job_dir: Path,
    world_size: int,
    nproc_per_node: int,
    exit_code: int,
    memory: MemoryWatch | None = None,
    node: int = 0,
    logs: Sequence[tuple[int, Path, Path]] | None = None,
) -> JobError:
    """The ``error`` object of job.json for a failed job (docs/interfaces.md section 2);
    ``memory``, the supervisor's samples, explains a SIGKILL by the OOM killer; ``node``,
    this machine's node rank in a multi-node job (its elastic files name local ranks only).
    ``logs``: (node, torchrun log dir, torchrun output) of every node whose torchrun wrote
    into this folder (a Slurm job: veri_tui/jobfolder/supervise/srun_tasks.py node_logs); default
    this node's."""
    job_dir = Path(job_dir)
    logs = logs or [(node, job_dir / ELASTIC, job_dir / TORCHRUN_LOG)]
    cands = trainer_records(job_dir)
    cands += [c for n, d, _ in logs for c in elastic_records(d, nproc_per_node, n)]
    cands += [c for _, _, out in logs for c in summary_records(out, nproc_per_node)]
    first = first_failure(cands)
    if first is None:
        last = next((ln for _, _, out in logs if (ln := _last_line(out))), "no output")
        return job_error(
            FailureCode.UNKNOWN, f"torchrun exited with code {exit_code}: {last}", world_size
        )
    if first.signum == signal.SIGKILL and memory is not None:
        note = memory.kill_note(first.time_ns / 1e9)
        if note:
            first.message += f"; {note}: likely the host's out-of-memory killer (see docs/jobs.md)"
    text = first.message.strip().splitlines()[0] if first.message.strip() else ""
    what = f"{first.type}: {text}" if first.type else text
    summary = (
        f"rank {first.rank}/{world_size} (node {first.node}, local_rank {first.local_rank}) "
        f"failed: {what[:500]}"
    )
    error = job_error(first.code, first.message, world_size, summary)
    error.update({"rank": first.rank, "node": first.node, "local_rank": first.local_rank})
    error["traceback"] = first.traceback
    return error


def peer_error(peer: PeerFailed, node: int, world_size: int | None) -> JobError:
    """The error of node ``node``, ended by the job's watcher because node ``peer["node"]``
    failed: a peer's failure (COMM_ERROR, platform), which the failed node's own error
    outranks when the nodes' records are gathered (veri_tui/launch/gather.py)."""
    what = f"node {peer['node']} ({peer['host']})" if peer["host"] else f"node {peer['node']}"
    code = peer["code"] or "failed"
    msg = f"another node failed: {what}, {code}; the job's watcher ended this node"
    error = job_error(FailureCode.COMM_ERROR, msg, world_size, f"node {node} ended: {msg}")
    error["node"] = node
    return error


#: Failures whose message already says what is wrong and where (a dataset's file and line):
#: the log gets the summary alone, the traceback goes to TRACEBACK_FILE in the job folder.
ONE_LINE_CODES = frozenset({"DATA_ERROR"})
TRACEBACK_FILE = "traceback.txt"


def append_report(log_path: Path, error: JobError, plan_line: str) -> None:
    """Append the summary line, the plan line and the rank's traceback to the rank-0 log;
    for ONE_LINE_CODES the summary line only, the traceback written beside the log."""
    lines = [str(error.get("summary", ""))]
    if error.get("code") in ONE_LINE_CODES:
        if error.get("traceback"):
            from veri_tui.jobfolder.contract.atomic import write_text_atomic

            write_text_atomic(log_path.parent / TRACEBACK_FILE, str(error["traceback"]))
        append_lines(log_path, lines)
        return
    if plan_line:
        lines.append(plan_line)
    if error.get("traceback"):
        lines.append(str(error["traceback"]).rstrip("\n"))
    append_lines(log_path, lines)


def append_lines(log_path: Path, lines: list[str]) -> None:
    """Append whole lines to the rank-0 log, starting on a fresh line: a rank killed
    mid-write may have left a partial last line."""
    with open(log_path, "a", encoding="utf-8") as fh:
        if log_path.stat().st_size:
            with open(log_path, "rb") as rf:
                rf.seek(-1, os.SEEK_END)
                if rf.read(1) != b"\n":
                    fh.write("\n")
        fh.write("\n".join(lines) + "\n")
