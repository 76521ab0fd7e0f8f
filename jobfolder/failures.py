"""Turn what a failed torchrun left behind into one failure report naming the first failing rank.

Three sources, most precise first (docs/interfaces.md section 2, field notes "torchrun and
failures"):

1. the trainer's own records, ``failures/rank-<r>.json`` (nanosecond ``time_ns``, ``code``,
   ``peer_failure``; also written for ``BaseException``s that torch elastic's ``record`` misses);
2. torch elastic's ``error.json`` files under the ``--log-dir`` (whole-second timestamps,
   written non-atomically, so a partial file is skipped rather than trusted);
3. torchrun's failure summary in ``torchrun.log``: the only trace of a rank killed by a signal.

Ranks that failed only because a peer died (gloo/nccl "Connection closed", timeouts, or the
SIGTERM torchrun itself sent while shutting the group down) are demoted, so the report blames
the rank that started it. Codes come from the one table of rules in jobfolder/failure_rules.py,
which the ranks use too. A rank killed by SIGKILL while memory was near full gets the host
out-of-memory hint of jobfolder/hostmem.py. Stdlib only: this runs in the supervisor, which
never imports torch.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobfolder.failure_rules import classify_text, qualify, split_type
from jobfolder.hostmem import MemoryWatch
from jobfolder.layout import ELASTIC, FAILURES, TORCHRUN_LOG
from jobfolder.ncclabort import reclassify
from jobfolder.record import JobError
from jobfolder.status import ATTRIBUTION, attribution_of


@dataclass
class Candidate:
    """One rank's failure as one source saw it."""

    rank: int
    local_rank: int
    node: int
    time_ns: int
    precise: bool  # nanosecond clock (trainer record) vs whole seconds (elastic, summary)
    type: str
    code: str
    message: str
    peer: bool
    traceback: str = ""
    signum: int = 0  # the signal that ended the rank (torchrun's summary), 0 for none

    def sort_key(self) -> tuple[int, int, int, int]:
        # Whole-second sources cannot order events inside one second: compare seconds first,
        # let a precise record win a tie (a signal's summary time is when torchrun noticed).
        return (
            self.time_ns // 10**9,
            0 if self.precise else 1,
            self.time_ns,
            self.rank,
        )


def _load_json(path: str | Path) -> dict[str, Any] | None:
    """A JSON object from a file, or None for a missing, partial or non-object file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def trainer_records(job_dir: Path) -> list[Candidate]:
    """The trainer's own per-rank records (failures/rank-<r>.json)."""
    out = []
    for path in sorted((job_dir / FAILURES).glob("rank-*.json")):
        rec = _load_json(path)
        if rec is None or "rank" not in rec:
            continue
        type_name = str(rec.get("type") or "")
        message = str(rec.get("message") or "")
        traceback = str(rec.get("traceback") or "")
        code = str(rec.get("code") or classify_text(qualify(type_name, traceback), message)[0])
        rank = int(rec["rank"])
        out.append(
            Candidate(
                rank=rank,
                local_rank=int(rec.get("local_rank", rank)),
                node=int(rec.get("node", 0)),
                time_ns=int(rec.get("time_ns") or 0),
                precise=True,
                type=type_name,
                code=code if code in ATTRIBUTION else "UNKNOWN",
                message=message,
                peer=bool(rec.get("peer_failure", False)),
                traceback=traceback,
            )
        )
    return out


def elastic_records(log_dir: Path, nproc_per_node: int, node: int = 0) -> list[Candidate]:
    """torch elastic's error.json files; the local rank is the folder name."""
    out = []
    for path in sorted(glob.glob(str(log_dir / "*" / "attempt_*" / "*" / "error.json"))):
        rec = _load_json(path)
        msg = rec.get("message") if rec else None
        if not isinstance(msg, dict):
            continue  # partial or foreign file: the summary or a trainer record covers the rank
        try:
            local_rank = int(Path(path).parent.name)
        except ValueError:
            continue
        extra = msg.get("extraInfo") or {}
        traceback = str(extra.get("py_callstack") or "")
        # The message names only type(e).__name__; the traceback's last line qualifies it.
        type_name, message = split_type(str(msg.get("message") or ""))
        code, peer = classify_text(qualify(type_name, traceback), message)
        out.append(
            Candidate(
                rank=node * nproc_per_node + local_rank,
                local_rank=local_rank,
                node=node,
                time_ns=int(extra.get("timestamp") or 0) * 10**9,
                precise=False,
                type=type_name.rsplit(".", 1)[-1],
                code=code,
                message=message,
                peer=peer,
                traceback=traceback,
            )
        )
    return out


_ENTRY = re.compile(
    r"time\s*:\s*(?P<time>\S+)\s*\n"
    r"\s*host\s*:\s*(?P<host>\S*)\s*\n"
    r"\s*rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<code>-?\d+)\s*\(pid:\s*(?P<pid>\d+)\)[^\n]*\n"
    r"\s*error_file\s*:\s*(?P<file>[^\n]*)\n"
    r"\s*traceback\s*:\s*(?P<tb>[^\n]*)"
)
_CLOSING = re.compile(r"Sending process (\d+) closing signal (SIG\w+)")


def summary_records(torchrun_log: Path, nproc_per_node: int) -> list[Candidate]:
    """Every rank in torchrun's failure summary: the only trace of a signal or a bare exit,
    and the fallback when a rank's error file is partial (a readable one takes precedence)."""
    try:
        text = torchrun_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    # Ranks torchrun itself signalled while shutting the group down are victims, not causes.
    closed = {int(pid) for pid, _sig in _CLOSING.findall(text)}
    seen, out = set(), []
    for m in _ENTRY.finditer(text):
        rank, exitcode, pid = int(m["rank"]), int(m["code"]), int(m["pid"])
        if rank in seen:
            continue  # a rank's first entry is its root cause; later ones repeat it
        seen.add(rank)
        try:
            when = int(time.mktime(time.strptime(m["time"], "%Y-%m-%d_%H:%M:%S"))) * 10**9
        except ValueError:
            when = 0
        sig = -exitcode if exitcode < 0 else 0
        if sig:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "unknown signal"
            code, message = "RANK_LOST", f"killed by signal {sig} ({name}), pid {pid}"
        else:
            code, message = "UNKNOWN", f"exited with code {exitcode}, pid {pid}"
        out.append(
            Candidate(
                rank=rank,
                local_rank=int(m["local"]),
                node=rank // max(nproc_per_node, 1),
                time_ns=when,
                precise=False,
                type="",
                code=code,
                message=message,
                peer=pid in closed,
                traceback=m["tb"].strip(),
                signum=sig,
            )
        )
    reclassify(out, text)  # a SIGABRT from NCCL's watchdog: COMM_ERROR, with NCCL's text
    return out


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


def job_error(
    code: str, message: str, world_size: int | None, summary: str | None = None
) -> JobError:
    """An ``error`` object (docs/interfaces.md section 2), the rank fields still empty."""
    return {
        "code": code,
        "attribution": attribution_of(code),
        "message": message,
        "rank": None,
        "node": None,
        "local_rank": None,
        "world_size": world_size,
        "traceback": "",
        "summary": summary or f"job failed: {message}",
    }


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
    into this folder (a Slurm job: jobfolder/slurm.py node_logs); default this node's."""
    job_dir = Path(job_dir)
    logs = logs or [(node, job_dir / ELASTIC, job_dir / TORCHRUN_LOG)]
    cands = trainer_records(job_dir)
    cands += [c for n, d, _ in logs for c in elastic_records(d, nproc_per_node, n)]
    cands += [c for _, _, out in logs for c in summary_records(out, nproc_per_node)]
    first = first_failure(cands)
    if first is None:
        last = next((ln for _, _, out in logs if (ln := _last_line(out))), "no output")
        return job_error("UNKNOWN", f"torchrun exited with code {exit_code}: {last}", world_size)
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
            from jobfolder.atomic import write_text_atomic

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
