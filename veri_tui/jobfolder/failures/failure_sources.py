"""The three sources a failure report reads, each turned into `Candidate`s: one rank's
failure as that source saw it (veri_tui/jobfolder/failures/failures.py picks the one to blame).

1. the trainer's own records, ``failures/rank-<r>.json`` (nanosecond ``time_ns``, ``code``,
   ``peer_failure``; also written for ``BaseException``s that torch elastic's ``record`` misses);
2. torch elastic's ``error.json`` files under the ``--log-dir`` (whole-second timestamps,
   written non-atomically, so a partial file is skipped rather than trusted);
3. torchrun's failure summary in ``torchrun.log``: the only trace of a rank killed by a signal.

A rank torchrun itself signalled while shutting the group down is marked a peer (a victim,
not a cause), unless it ended by SIGKILL that torchrun never sent it: the kernel's OOM killer
(or someone else) killed it, and torchrun only saw its peer fail first (the dying rank's
connections close before the kernel lets its parent reap it). Stdlib only.
"""

from __future__ import annotations

import glob
import json
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import FAILURES
from veri_tui.jobfolder.contract.status import ATTRIBUTION, FailureCode
from veri_tui.jobfolder.failures.failure_rules import classify_text, qualify, split_type
from veri_tui.jobfolder.failures.ncclabort import reclassify


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
                code=code if code in ATTRIBUTION else FailureCode.UNKNOWN,
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


def _signum(name: str) -> int:
    try:
        return int(signal.Signals[name])
    except KeyError:
        return 0


def _victim(sent: set[int] | None, sig: int) -> bool:
    """A rank torchrun sent ``sent`` while closing the group, which ended by ``sig`` (0: it
    exited), ended because of torchrun, unless it was SIGKILLed and torchrun sent no SIGKILL:
    then something else killed it (the OOM killer) before torchrun's SIGTERM could matter."""
    if not sent:
        return False
    return not (sig == signal.SIGKILL and signal.SIGKILL not in sent)


def summary_records(torchrun_log: Path, nproc_per_node: int) -> list[Candidate]:
    """Every rank in torchrun's failure summary: the only trace of a signal or a bare exit,
    and the fallback when a rank's error file is partial (a readable one takes precedence)."""
    try:
        text = torchrun_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    # Ranks torchrun itself signalled while shutting the group down are victims, not causes.
    closed: dict[int, set[int]] = {}
    for pid, name in _CLOSING.findall(text):
        closed.setdefault(int(pid), set()).add(_signum(name))
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
            code, message = FailureCode.RANK_LOST, f"killed by signal {sig} ({name}), pid {pid}"
        else:
            code, message = FailureCode.UNKNOWN, f"exited with code {exitcode}, pid {pid}"
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
                peer=_victim(closed.get(pid), sig),
                traceback=m["tb"].strip(),
                signum=sig,
            )
        )
    reclassify(out, text)  # a SIGABRT from NCCL's watchdog: COMM_ERROR, with NCCL's text
    return out
