"""One multi-node job's record, gathered from its nodes' records (each node has its own job
folder and job.json, read as a one-host job's is, with the one lost rule).

The job has ended when every node has; it failed when a node failed, and its error is the
node error that names a cause (a rank's own failure, not a peer's "connection closed"),
else node 0's. A node that cannot be reached, or whose supervisor is gone, is reported as
that node's ranks lost (RANK_LOST). Gathering is a pure function of what was read: ending the
other nodes of a failed job and retrying it are its watcher's (watcher.py), never a read's.
"""

from __future__ import annotations

import copy

from veri_tui.jobfolder.contract.record import Attempt, JobError, JobRecord, NodeState, job_error
from veri_tui.jobfolder.contract.status import (
    CANCELLED,
    FAILED,
    RUNNING,
    SUCCEEDED,
    FailureCode,
    has_ended,
)
from veri_tui.jobfolder.failures.failure_rules import is_peer_text


def lost_node(k: int, host: str, nproc: int, world: int, why: str) -> JobError:
    """The error of node ``k``'s ranks, lost with it."""
    ranks = f"{k * nproc}" if nproc == 1 else f"{k * nproc}-{(k + 1) * nproc - 1}"
    msg = f"node {k} ({host}) lost: {why}; its ranks ({ranks}) are gone"
    error = job_error(
        FailureCode.RANK_LOST, msg, world, f"rank {ranks}/{world} (node {k}) lost: {why}"
    )
    error["node"] = k
    return error


def _cause(errors: list[JobError]) -> JobError:
    causes = [e for e in errors if not is_peer_text(str(e.get("message", "")))]
    return (causes or errors)[0]


def gather(records: list[JobRecord | None], hosts: list[str], whys: list[str]) -> JobRecord:
    """The job's record from its nodes' (None: unreachable, `whys` says why)."""
    first = next((r for r in records if r), None)
    base: JobRecord = copy.copy(first) if first is not None else {}
    spec = base.get("spec") or {}
    world = int(spec.get("gpu_count") or len(hosts))
    nproc = int(spec.get("nproc_per_node") or 1)
    errors: list[JobError] = []
    statuses: list[str] = []
    for k, (rec, host) in enumerate(zip(records, hosts, strict=True)):
        if rec is None or rec.get("lost"):
            why = whys[k] if rec is None else "its supervisor is gone"
            errors.append(lost_node(k, host, nproc, world, why))
            statuses.append(FAILED)
            continue
        statuses.append(str(rec.get("status")))
        error = rec.get("error")
        if rec.get("status") == FAILED and error:
            errors.append(copy.copy(error))
    nodes: list[NodeState] = [
        {"node": k, "host": h, "status": s}
        for k, (h, s) in enumerate(zip(hosts, statuses, strict=True))
    ]
    base["nodes"] = nodes
    base["host"] = ", ".join(hosts)
    if FAILED in statuses:
        base["error"] = _cause(errors)
    if all(has_ended(s) for s in statuses):
        ok = all(s == SUCCEEDED for s in statuses)
        base["status"] = FAILED if FAILED in statuses else SUCCEEDED if ok else CANCELLED
    elif has_ended(base.get("status")):
        base["status"] = RUNNING  # node 0 is done, another node is not yet
    base.pop("lost", None)
    base["attempts"] = _attempts([r for r in records if r])
    credits = [float(r.get("credited_gpu_s") or 0.0) for r in records if r]
    if credits:  # every node's attempt counts the whole job's GPUs: the largest, not a sum
        base["credited_gpu_s"] = max(credits)
    return base


def _attempts(records: list[JobRecord]) -> list[Attempt]:
    """Node 0's attempts, each failed when any node's failed (a node the watcher ended
    records the other node's failure as its peer's: veri_tui/jobfolder/failures/failures.py
    peer_error), with the error that names a cause (a rank's own failure, not a peer's "connection
    closed" on another node, nor "another node failed")."""
    out: list[Attempt] = (
        [copy.copy(a) for a in (records[0].get("attempts") or [])] if records else []
    )
    for i, attempt in enumerate(out):
        failed: list[JobError] = []
        for rec in records:
            mine = rec.get("attempts") or []
            if len(mine) > i and mine[i].get("status") == FAILED:
                failed.append(mine[i].get("error") or {})
        if failed:
            attempt["status"] = FAILED
            attempt["error"] = _cause(failed)
    return out
