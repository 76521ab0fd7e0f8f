"""One multi-node job as the facade sees it: every node's record gathered into one.

Each node's job folder is read as a one-host job's is (`RemoteTarget`, pointed at that node's
folder). The job has ended when every node has; it failed when a node failed, and its error
is the node error that names a cause (a rank's own failure, not a peer's "connection closed"),
else node 0's. A node that cannot be reached, or whose supervisor is gone, is reported as
that node's ranks lost (RANK_LOST). Once a node has failed, reading the job ends the others
(torch's own peer errors usually end them first). Cancel stops every node, in parallel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainer.failure_rules import is_peer_text
from trainer.failures import job_error
from trainer.jobdir import CANCELLED, FAILED, RUNNING, SUCCEEDED, JobRecord, has_ended
from trainer.procs import GRACE_S
from veri_tui.errors import VeriError
from veri_tui.launch.records import LogLine, wait_until_ended
from veri_tui.launch.ssh import registry
from veri_tui.launch.ssh.multinode import in_parallel
from veri_tui.launch.ssh.target import RemoteTarget


class NodeTarget(RemoteTarget):
    """One node's folder of a multi-node job, read and cancelled like a one-host job."""

    def __init__(self, entry: registry.RegistryEntry) -> None:
        super().__init__(entry.host)
        self.entry = entry

    def _job(self, job_id: str) -> registry.RegistryEntry:
        return self.entry

    def _save(self, job: registry.RegistryEntry) -> None:
        pass  # the job's one registry entry is written by MultiNodeTarget


def _lost_node(k: int, host: str, nproc: int, world: int, why: str) -> dict[str, Any]:
    ranks = f"{k * nproc}" if nproc == 1 else f"{k * nproc}-{(k + 1) * nproc - 1}"
    msg = f"node {k} ({host}) lost: {why}; its ranks ({ranks}) are gone"
    error = job_error("RANK_LOST", msg, world, f"rank {ranks}/{world} (node {k}) lost: {why}")
    error.update(node=k)
    return error


def gather(records: list[JobRecord | None], hosts: list[str], whys: list[str]) -> JobRecord:
    """The job's record from its nodes' (None: unreachable, `whys` says why)."""
    base: JobRecord = dict(next((r for r in records if r), {}))  # type: ignore[assignment]
    spec = base.get("spec") or {}
    world = int(spec.get("gpu_count") or len(hosts))
    nproc = int(spec.get("nproc_per_node") or 1)
    errors: list[dict[str, Any]] = []
    statuses = []
    for k, (rec, host) in enumerate(zip(records, hosts, strict=True)):
        if rec is None or rec.get("lost"):
            why = whys[k] if rec is None else "its supervisor is gone"
            errors.append(_lost_node(k, host, nproc, world, why))
            statuses.append(FAILED)
            continue
        statuses.append(rec.get("status"))
        if rec.get("status") == FAILED and rec.get("error"):
            errors.append(dict(rec["error"]))  # type: ignore[arg-type]
    ended = all(has_ended(s) for s in statuses)
    base["nodes"] = [  # type: ignore[typeddict-unknown-key]
        {"node": k, "host": h, "status": s}
        for k, (h, s) in enumerate(zip(hosts, statuses, strict=True))
    ]
    base["host"] = ", ".join(hosts)
    if FAILED in statuses:
        causes = [e for e in errors if not is_peer_text(str(e.get("message", "")))]
        base["error"] = (causes or errors)[0]  # type: ignore[typeddict-item]
    if ended:
        ok = all(s == SUCCEEDED for s in statuses)
        base["status"] = FAILED if FAILED in statuses else SUCCEEDED if ok else CANCELLED
    elif has_ended(base.get("status")):
        base["status"] = RUNNING  # node 0 is done, another node is not yet
    base.pop("lost", None)
    return base


class MultiNodeTarget:
    """The facade's target for a multi-node job (registry entry with `nodes`)."""

    def __init__(self, entry: registry.RegistryEntry) -> None:
        self.entry = entry
        self.name = f"ssh:{', '.join(n['host'] for n in entry.nodes or [])}"
        self.nodes = [
            NodeTarget(
                registry.RegistryEntry(
                    entry.job_id, n["host"], n["job_dir"], n["pid"], entry.python, {}
                )
            )  # fmt: skip
            for n in entry.nodes or []
        ]

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def get_job(self, job_id: str) -> JobRecord:
        """Every node's record, read in parallel, gathered into the job's."""
        read = in_parallel(lambda n: n.get_job(job_id), self.nodes)
        records = [r if isinstance(r, dict) else None for r in read]
        whys = [f"cannot reach {n.host} ({r})" if isinstance(r, Exception) else ""
                for n, r in zip(self.nodes, read, strict=True)]  # fmt: skip
        if any(r is not None and r.get("status") == FAILED for r in records):
            # A failed node: the others are ended (their supervisors record cancelled).
            for node, rec in zip(self.nodes, records, strict=True):
                if rec is not None and not has_ended(rec):
                    pid = node._supervisor_pid(node.entry)
                    if pid is not None:
                        node.conn.run(["kill", "-TERM", str(pid)])
        record = gather(records, [n.host for n in self.nodes], whys)
        self.entry.record = record
        registry.save(self.entry)
        return record

    def list_jobs(self) -> list[JobRecord]:
        return [self.get_job(self.entry.job_id)]

    def read_log(self, job_id: str, offset: int = 0) -> bytes:
        """Rank 0's log, on node 0."""
        return self.nodes[0].read_log(job_id, offset)

    def follow_log(self, job_id: str, offset: int = 0, **tail_options: Any) -> Iterator[LogLine]:
        """Rank 0's log on node 0, until node 0's supervisor has ended."""
        return self.nodes[0].follow_log(job_id, offset, **tail_options)

    def wait(self, job_id: str, poll_s: float = 1.0) -> JobRecord:
        return wait_until_ended(lambda: self.get_job(job_id), poll_s)

    def cancel(self, job_id: str, grace: float = GRACE_S) -> JobRecord:
        """Cancel every node at once; a node that cannot be reached is reported, not skipped."""
        done = in_parallel(lambda n: n.cancel(job_id, grace), self.nodes)
        unreachable = [f"{n.host}: {r}" for n, r in zip(self.nodes, done, strict=True)
                       if isinstance(r, Exception)]  # fmt: skip
        record = self.get_job(job_id)
        if unreachable:
            raise VeriError(f"cancel did not reach every node ({'; '.join(unreachable)})", "job")
        return record
