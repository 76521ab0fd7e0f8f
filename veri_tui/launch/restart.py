"""A new attempt of a multi-node job on every node, from one step: a resume, or a retry.

`resume_nodes` (the facade's `resume`, the app's R, and the watcher's retries):
1. whether the node folders share one filesystem (nodes.shared_storage);
2. the newest step committed and verified on every node (checkpoints.choose_step);
3. node 0's rendezvous again: the job's own port if node 0 can still bind it, else a fresh
   one, probed from every other node as at launch (nodes.probe_rendezvous);
4. every node prepared (job.json `pending`, the step in `resume_choice`, the new endpoint
   in its spec), node 0 first, before any supervisor starts; then the job submitted again by
   its backend (`submit`: every supervisor, the same job id; its handle kept in the
   registry entry). A node that cannot be prepared or started cancels the others.

Retries: no node's supervisor restarts a multi-node job by itself (it cannot know the other nodes'
checkpoints; veri_tui.jobfolder.contract.attempts.max_restarts). The job's watcher does
(watcher.py): once the gathered record failed for the platform with restarts left (`retry_due`, in
retries.py), it resumes every node as above, the attempt marked `retry`. One change at a time: a
lock on the registry entry here, and node 0 refuses a second resume of the same attempt
(`after_attempt`, under its job lock).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.atomic import job_lock
from veri_tui.jobfolder.contract.attempts import attempts_of, max_restarts
from veri_tui.jobfolder.contract.record import JobRecord, JobSpec, ResumeChoice
from veri_tui.jobfolder.contract.status import FailureCode
from veri_tui.launch import registry
from veri_tui.launch.checkpoints import NodeCheck, choose_step
from veri_tui.launch.hostpool import in_parallel
from veri_tui.launch.nodes import probe_rendezvous, shared_storage, split_endpoint
from veri_tui.launch.retries import retries_done, retry_due
from veri_tui.plan.gpus import gpus_text

__all__ = ["layout_refusal", "resume_nodes", "retry", "retry_due"]

if TYPE_CHECKING:
    from veri_tui.launch.host import Host
    from veri_tui.launch.target import JobTarget


def layout_refusal(record: JobRecord, gpu_count: int | None, sets: Sequence[str]
                   ) -> VeriError | None:  # fmt: skip
    """A re-plan a multi-node resume cannot do: its checkpoints are rank-local (no
    resharding) and every node would need its preflight again."""
    job_id, spec = record.get("job_id"), record.get("spec") or {}
    nodes, world = int(spec.get("nnodes") or 1), int(spec.get("gpu_count") or 1)
    if gpu_count is not None and int(gpu_count) != world:
        return VeriError(
            f"{job_id} runs on {nodes} nodes x {gpus_text(world // nodes)}; a multi-node job "
            "resumes on its own layout (each rank's checkpoint is its own: no resharding across "
            "nodes); launch it again for another gpu_count",
            key="gpu_count",
        )
    if sets:
        key = str(sets[0]).partition("=")[0] or "set"
        return VeriError(
            f"a multi-node job resumes with its own plan (--set is not applied); launch "
            f"{job_id} again to change {key}",
            key=key,
        )
    return None


def _endpoints(hosts: Sequence[Host], specs: list[JobSpec]) -> list[str]:
    """Each node's `rdzv_endpoint` for the new attempt: node 0's port if it still binds
    there, else a fresh one (the old may be held, or in TIME_WAIT); every other node probes
    it as at launch. VeriError naming a node that cannot reach it."""
    _, old_port = split_endpoint(specs[0].get("rdzv_endpoint"))  # where node 0 listened
    addr, old_reach = split_endpoint(specs[1].get("rdzv_endpoint"))  # what the others dialled
    addr, reach, port, problems = probe_rendezvous(hosts, old_port, f"{addr}:{old_reach}")
    if problems and problems[0].key == "rdzv_port" and old_port == old_reach:
        # The port was not forwarded (the others dial node 0's own port): any port will do.
        addr, reach, port, problems = probe_rendezvous(hosts, None, addr)
    if problems:
        raise VeriError(problems)
    return [f"{addr}:{port if k == 0 else reach}" for k in range(len(hosts))]


def resume_nodes(target: JobTarget, retry: str | None = None) -> JobRecord:
    """A new attempt of the ended multi-node job on every node; ``retry``: the log line of a
    platform retry (the attempt is marked so). Returns node 0's record as prepared (pending,
    before its supervisor began the attempt). One change at a time (the registry lock)."""
    with job_lock(registry.entry_path(target.job_id)):
        fresh = registry.load(target.job_id)
        if fresh is not None:
            target.entry = fresh
            for node, n in zip(target.nodes, fresh.ref.nodes, strict=False):
                node.handle = n.handle
        return _resume(target, retry)


def _resume(target: JobTarget, retry: str | None) -> JobRecord:
    nodes, job_id = target.nodes, target.job_id
    read = in_parallel(target.node_record, nodes)
    records: list[JobRecord] = []
    for node, rec in zip(nodes, read, strict=True):
        if isinstance(rec, Exception):
            raise VeriError(
                f"cannot resume {job_id}: node {node.host.machine.name} ({rec})", key="job"
            )
        records.append(rec)
    hosts = [n.host for n in nodes]
    dirs = [n.job_dir for n in nodes]
    shared = shared_storage(hosts, [posixpath.dirname(d) for d in dirs])
    step, lines = choose_step(NodeCheck(hosts, dirs, shared))
    endpoints = _endpoints(hosts, [r["spec"] for r in records])
    count = len(nodes)
    storage = (
        f"resume: the {count} node folders are on one shared filesystem: checked from node "
        f"0 ({hosts[0].machine.name})" if shared else
        f"resume: checkpoints checked on each of the {count} nodes (no shared filesystem)"
    )  # fmt: skip
    where = (
        f"step-{step} (verified on {count} nodes)" if step is not None else
        "step 0 (no checkpoint committed and verified on every node: from scratch)"
    )  # fmt: skip
    choice: ResumeChoice = {"step": step, "where": where, "retry": retry is not None,
                            "lines": ([retry] if retry else []) + [storage] + lines}  # fmt: skip
    specs: list[JobSpec] = [
        {**rec["spec"], "rdzv_endpoint": endpoint}
        for rec, endpoint in zip(records, endpoints, strict=True)
    ]
    # Node 0 first, under its job lock: a second resume of the same attempt stops here.
    first: ResumeChoice = {**choice, "after_attempt": len(attempts_of(records[0]))}
    record = target.prepare(0, specs[0], first)
    others = list(range(1, count))
    _or_cancel(target, in_parallel(lambda k: target.prepare(k, specs[k], choice), others))
    try:
        target.submit()  # every node's supervisor, by the job's backend
    except Exception as exc:  # noqa: BLE001 - every node is ended, then it is raised
        _or_cancel(target, [exc])
    if target.entry is not None:
        entry = registry.load(job_id) or target.entry
        entry.retry_refused = None
        target.entry = entry
        registry.save(entry)
    record["host"] = ", ".join(h.machine.name for h in hosts)
    return record


def _or_cancel(target: JobTarget, results: Sequence[object]) -> None:
    """No half-resumed job keeps running: a node that failed cancels every node."""
    broken = [r for r in results if isinstance(r, Exception)]
    if broken:
        try:
            target.cancel()
        except VeriError:
            pass  # the first failure is the one to report
        raise broken[0]


def retry(target: JobTarget) -> JobRecord:
    """Restart every node after a platform failure, if still due (the caller, the job's
    watcher, read it so); the record after. A retry that cannot start is said once in the
    job's log and kept in the registry, so it is not tried again for that attempt."""
    record = target.get_job()
    fresh = registry.load(target.job_id)
    if fresh is None or not retry_due(record, fresh):
        return record
    limit = max_restarts(record.get("spec") or {}, alone=False)
    code = (record.get("error") or {}).get("code", FailureCode.UNKNOWN)
    line = (f"retry: {code} (platform) ended the attempt; restart "
            f"{retries_done(record) + 1} of {limit} (max_restarts)")  # fmt: skip
    try:
        resume_nodes(target, retry=line)
    except Exception as exc:  # noqa: BLE001 - said in the log; the job stays failed
        fresh = registry.load(target.job_id) or fresh
        fresh.retry_refused = str(len(attempts_of(record)))
        registry.save(fresh)
        target.append_log(f"retry: not possible ({exc}); the job stays failed")
        return record
    return target.get_job()
