"""One multi-node job as the facade sees it: every node's record gathered into one.

Each node's job folder is read as a one-host job's is (`RemoteTarget`, pointed at that node's
folder). The job has ended when every node has; it failed when a node failed, and its error
is the node error that names a cause (a rank's own failure, not a peer's "connection closed"),
else node 0's. A node that cannot be reached, or whose supervisor is gone, is reported as
that node's ranks lost (RANK_LOST). Once a node has failed, reading the job ends the others
(torch's own peer errors usually end them first); a platform failure with `max_restarts`
left is then retried on every node (multinode_resume.py). Cancel stops every node, in
parallel; resume starts a new attempt on every node from one step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import paramiko

from jobfolder.atomic import job_lock
from jobfolder.failure_rules import is_peer_text
from jobfolder.failures import job_error
from jobfolder.procs import GRACE_S
from jobfolder.record import Attempt, JobRecord
from jobfolder.status import CANCELLED, FAILED, RUNNING, SUCCEEDED, has_ended
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
    base["attempts"] = _attempts([r for r in records if r], errors)
    credits = [float(r.get("credited_gpu_s") or 0.0) for r in records if r]
    if credits:  # every node's attempt counts the whole job's GPUs: the largest, not a sum
        base["credited_gpu_s"] = max(credits)
    return base


def _attempts(records: list[JobRecord], errors: list[dict[str, Any]]) -> list[Attempt]:
    """Node 0's attempts, each failed when any node's failed (a peer node records
    `cancelled` when the reader ended it), with the error that names a cause (a rank's own
    failure, not a peer's "connection closed" on another node)."""
    out: list[Attempt] = [dict(a) for a in (records[0].get("attempts") or [])] if records else []
    for i, attempt in enumerate(out):
        failed = [
            r["attempts"][i].get("error") or {}
            for r in records
            if len(r.get("attempts") or []) > i and r["attempts"][i].get("status") == FAILED
        ]
        if failed:
            causes = [e for e in failed if not is_peer_text(str(e.get("message", "")))]
            attempt.update(status=FAILED, error=(causes or failed)[0])  # type: ignore[typeddict-item]
    return out


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

    def refresh_entry(self) -> None:
        """The nodes' supervisor pids as the registry has them now (another reader may have
        resumed the job meanwhile)."""
        fresh = registry.load(self.entry.job_id)
        if fresh is not None and fresh.nodes:
            self.entry.nodes, self.entry.pid = fresh.nodes, fresh.pid
            self.entry.retry_refused = fresh.retry_refused
            for node, n in zip(self.nodes, fresh.nodes, strict=False):
                node.entry.pid = n["pid"]

    def get_job(self, job_id: str, retry: bool = True) -> JobRecord:
        """Every node's record, read in parallel, gathered into the job's; a platform
        failure with restarts left is retried on every node first, unless ``retry`` is
        False (multinode_resume.py)."""
        record = self._gather(job_id)
        if retry:
            from veri_tui.launch.ssh.multinode_resume import retry as do_retry
            from veri_tui.launch.ssh.multinode_resume import retry_due

            if retry_due(record, self.entry):
                record = do_retry(self, job_id, record)
        return record

    def _gather(self, job_id: str) -> JobRecord:
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
        saved = registry.load(job_id)  # pids another reader's retry wrote stay as written
        entry = saved if saved is not None and saved.nodes else self.entry
        entry.record = record
        registry.save(entry)
        return record

    def list_jobs(self) -> list[JobRecord]:
        return [self.get_job(self.entry.job_id)]

    def read_log(self, job_id: str, offset: int = 0) -> bytes:
        """Rank 0's log, on node 0."""
        return self.nodes[0].read_log(job_id, offset)

    def follow_log(self, job_id: str, offset: int = 0, **tail_options: Any) -> Iterator[LogLine]:
        """Rank 0's log on node 0 until the job has ended: a tail ends with node 0's
        supervisor, and when reading the job then starts a retry, it goes on from there."""
        while True:
            got = False
            for line in self.nodes[0].follow_log(job_id, offset, **tail_options):
                offset, got = line.end, True
                yield line
            if has_ended(self.get_job(job_id)):
                return
            if not got:
                time.sleep(1.0)  # node 0 is done, another node is not yet

    def resume_record(self, gpu_count: int | None, sets: Sequence[str]) -> JobRecord:
        """The record `jobs.resume` judges (read without retrying), after refusing what a
        multi-node resume cannot change (its layout and plan)."""
        from veri_tui.launch.ssh.multinode_resume import layout_refusal

        record = self.get_job(self.entry.job_id, retry=False)
        refused = layout_refusal(record, gpu_count, sets)
        if refused is not None:
            raise refused
        return record

    def resume(self, job_id: str, spec: dict[str, Any] | None = None) -> JobRecord:
        """A new attempt on every node from the newest step committed and verified on all
        (``spec`` is never a re-plan here: `resume_record` refused one)."""
        from veri_tui.launch.ssh.multinode_resume import resume_nodes

        with job_lock(registry.registry_dir() / f"{job_id}.json"):
            self.refresh_entry()
            try:
                return resume_nodes(self, job_id)
            except (OSError, paramiko.SSHException) as exc:  # one error line, no traceback
                raise VeriError(f"resume of {job_id} failed: {exc}", key="job") from exc

    def wait(self, job_id: str, poll_s: float = 1.0) -> JobRecord:
        return wait_until_ended(lambda: self.get_job(job_id), poll_s)

    def cancel(self, job_id: str, grace: float = GRACE_S) -> JobRecord:
        """Cancel every node at once; a node that cannot be reached is reported, not skipped."""
        done = in_parallel(lambda n: n.cancel(job_id, grace), self.nodes)
        unreachable = [f"{n.host}: {r}" for n, r in zip(self.nodes, done, strict=True)
                       if isinstance(r, Exception)]  # fmt: skip
        record = self.get_job(job_id, retry=False)  # a cancelled job is never retried
        if unreachable:
            raise VeriError(f"cancel did not reach every node ({'; '.join(unreachable)})", "job")
        return record
