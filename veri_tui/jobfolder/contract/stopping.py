"""Stopping a job at a step boundary with a checkpoint: the request and the answer.

A Slurm job is stopped before its allocation ends: the time limit is coming (Slurm sends
the batch shell, our supervisor, SIGUSR1 120 s before it: `#SBATCH --signal=B:USR1@120`),
or the job is being preempted or requeued (Slurm sends every process of the job SIGTERM, and
SIGKILL `KillWait` seconds later). Signalling torchrun would not do: it dies on SIGUSR1 and
takes SIGTERM as its own shutdown. So the supervisor writes `stop.request` in the (shared) job
folder, and the ranks, which the supervisor starts with `STOP_ENV` set, look for it at every
step boundary (a SIGTERM to a rank counts as the same request, unless `cancel.request` is
there: then the rank ends at once). The ranks agree with one all-reduce, so every rank stops
after the same step; they save a checkpoint of it, rank 0 writes `stopped.json` (`Stopped`)
and every rank exits 0. The supervisor tells that apart from a finished run by that file.

A multi-node job's watcher ends the other nodes once one failed (veri_tui/launch/watcher.py): it
writes `peer_failed.json` (`PeerFailed`: which node failed, with which code) in each other node's
folder, then SIGTERMs its supervisor, which reads the file and records that node's end as the peer's
failure (veri_tui/jobfolder/failures/failures.py `peer_error`), never as a user's cancel.

The files are one attempt's: the next attempt's supervisor archives them (layout.PER_ATTEMPT).
`SHARED_ENV` tells the ranks that every node shares this job folder (a Slurm job): one
global DCP checkpoint and one token cache for the whole job, not one per node.

Stdlib only: imported by the supervisor and by the trainer's ranks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import CANCEL_REQUEST, PEER_FAILED, STOP_REQUEST, STOPPED
from veri_tui.jobfolder.contract.record import now_iso

#: Set (to "1") by the supervisor for ranks that must honour stop requests.
STOP_ENV = "VERI_STOP_REQUESTS"
#: Set (to "1") when every node's ranks share one job folder (Slurm's shared filesystem).
SHARED_ENV = "VERI_SHARED_JOB_DIR"
#: Why a job is asked to stop: the values of `Request.reason`.
PREEMPTED, TIME_LIMIT = "preempted", "time_limit"


class Request(TypedDict):
    """`stop.request`: why, which signal said so, and when."""

    reason: str
    signal: str
    at: str


class Stopped(TypedDict):
    """`stopped.json`: the step every rank stopped after, and its checkpoint (None: none was
    needed, no step ran in this attempt or the step was already saved)."""

    step: int
    checkpoint: str | None
    reason: str


def request_stop(job_dir: Path, reason: str, signal_name: str) -> None:
    """Ask the ranks of the job in ``job_dir`` to stop at their next step boundary."""
    request: Request = {"reason": reason, "signal": signal_name, "at": now_iso()}
    write_json_atomic(Path(job_dir) / STOP_REQUEST, request)


def stop_reason(job_dir: Path) -> str | None:
    """The reason of the stop request in ``job_dir``, or None when there is none. An
    unreadable request (written by hand, say) still asks to stop: as a preemption."""
    path = Path(job_dir) / STOP_REQUEST
    if not path.exists():
        return None
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        return PREEMPTED


def cancel_requested(job_dir: Path) -> bool:
    """True when a cancel of the job has been asked for (`cancel.request`)."""
    return (Path(job_dir) / CANCEL_REQUEST).exists()


def write_stopped(job_dir: Path, step: int, checkpoint: str | None, reason: str) -> None:
    """Rank 0's answer: every rank stopped after ``step``."""
    stopped: Stopped = {"step": step, "checkpoint": checkpoint, "reason": reason}
    write_json_atomic(Path(job_dir) / STOPPED, stopped)


def read_stopped(job_dir: Path) -> Stopped | None:
    """The ranks' answer to a stop request, or None when they did not stop on one."""
    try:
        data = json.loads((Path(job_dir) / STOPPED).read_text(encoding="utf-8"))
        return {
            "step": int(data["step"]),
            "checkpoint": data.get("checkpoint"),
            "reason": str(data.get("reason") or PREEMPTED),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


class PeerFailed(TypedDict):
    """`peer_failed.json`: the node whose failure made the watcher end this one."""

    node: int
    host: str
    code: str
    at: str


def peer_failed_bytes(node: int, host: str, code: str) -> bytes:
    """What the watcher writes (on the other nodes' hosts, so as bytes)."""
    failed: PeerFailed = {"node": node, "host": host, "code": code, "at": now_iso()}
    return json.dumps(failed).encode("utf-8")


def read_peer_failed(job_dir: Path) -> PeerFailed | None:
    """The watcher's word that another node failed, or None (the SIGTERM is a cancel)."""
    try:
        data = json.loads((Path(job_dir) / PEER_FAILED).read_text(encoding="utf-8"))
        return {"node": int(data["node"]), "host": str(data.get("host") or ""),
                "code": str(data.get("code") or ""), "at": str(data.get("at") or "")}  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None
