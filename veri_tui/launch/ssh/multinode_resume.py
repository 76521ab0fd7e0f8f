"""Resume and retry a multi-node job: one new attempt on every node, from one step.

`resume_nodes` (the facade's `jobs.resume`, the app's R, and retries):
1. whether the node folders share one filesystem (multinode_ckpt.shared_storage);
2. the newest step committed and verified on every node (multinode_ckpt.choose_step);
3. node 0's rendezvous again: the job's own port if node 0 can still bind it, else a fresh
   one, probed from every other node as at launch (multinode.probe_rendezvous);
4. every node prepared (job.json `pending`, the step in `resume_choice`, the new endpoint
   in its spec), node 0 first, before any supervisor starts; then every supervisor started
   with the same job id. A node that cannot be prepared or started cancels the others.

Retries: no node's supervisor restarts a multi-node job by itself (it cannot know the other
nodes' checkpoints; jobfolder.attempts.max_restarts). The launcher side does: whoever reads
the gathered record (MultiNodeTarget.get_job: `launch --wait`, `resume --wait`, `jobs`, the
app) and finds it failed for the platform with restarts left resumes every node as above,
the attempt marked `retry`. One reader does it: a lock beside the registry entry here, and
node 0 refuses a second resume of the same attempt (`after_attempt`, under its job lock).
"""

from __future__ import annotations

import posixpath
from types import SimpleNamespace
from typing import Any

from jobfolder.atomic import job_lock
from jobfolder.attempts import attempts_of, max_restarts, retryable
from jobfolder.record import JobRecord
from jobfolder.status import FAILED
from veri_tui.errors import VeriError
from veri_tui.launch.ssh import registry
from veri_tui.launch.ssh.multinode import in_parallel, probe_rendezvous, split_endpoint
from veri_tui.launch.ssh.multinode_ckpt import NodeCheck, choose_step, shared_storage


def layout_refusal(record: JobRecord, gpu_count: int | None, sets: Any) -> VeriError | None:
    """A re-plan a multi-node resume cannot do: its checkpoints are rank-local (no
    resharding) and every node would need its preflight again."""
    job_id, spec = record.get("job_id"), record.get("spec") or {}
    nodes, world = int(spec.get("nnodes") or 1), int(spec.get("gpu_count") or 1)
    if gpu_count is not None and int(gpu_count) != world:
        return VeriError(
            f"{job_id} runs on {nodes} nodes x {world // nodes} GPUs; a multi-node job resumes "
            "on its own layout (each rank's checkpoint is its own: no resharding across "
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


def _endpoints(conns: list[Any], specs: list[dict[str, Any]]) -> list[str]:
    """Each node's `rdzv_endpoint` for the new attempt: node 0's port if it still binds
    there, else a fresh one (the old may be held, or in TIME_WAIT); every other node probes
    it as at launch. VeriError naming a node that cannot reach it."""
    _, old_port = split_endpoint(specs[0]["rdzv_endpoint"])  # where node 0 listened
    addr, old_reach = split_endpoint(specs[1]["rdzv_endpoint"])  # what the others dialled
    job = SimpleNamespace(rdzv_port=old_port, rdzv_endpoint=f"{addr}:{old_reach}")
    addr, reach, port, problems = probe_rendezvous(conns, job)
    if problems and problems[0].key == "rdzv_port" and old_port == old_reach:
        # The port was not forwarded (the others dial node 0's own port): any port will do.
        job = SimpleNamespace(rdzv_port=None, rdzv_endpoint=addr)
        addr, reach, port, problems = probe_rendezvous(conns, job)
    if problems:
        raise VeriError(problems)
    return [f"{addr}:{port if k == 0 else reach}" for k in range(len(conns))]


def resume_nodes(target: Any, job_id: str, retry: str | None = None) -> JobRecord:
    """A new attempt of the ended multi-node job on every node (`target`: MultiNodeTarget);
    ``retry``: the log line of a platform retry (the attempt is marked so). Returns node
    0's record as prepared (pending, before its supervisor began the attempt)."""
    nodes = target.nodes
    read = in_parallel(lambda n: n.get_job(job_id), nodes)
    for node, rec in zip(nodes, read, strict=True):
        if isinstance(rec, Exception):
            raise VeriError(f"cannot resume {job_id}: node {node.host} ({rec})", key="job")
    conns = [n.conn for n in nodes]
    dirs = [n.entry.job_dir for n in nodes]
    shared = shared_storage(conns, [posixpath.dirname(d) for d in dirs])
    step, lines = choose_step(NodeCheck(conns, dirs, target.entry.python, shared))
    endpoints = _endpoints(conns, [r["spec"] for r in read])
    count = len(nodes)
    storage = (
        f"resume: the {count} node folders are on one shared filesystem: checked from node "
        f"0 ({nodes[0].host})" if shared else
        f"resume: checkpoints checked on each of the {count} nodes (no shared filesystem)"
    )  # fmt: skip
    where = (
        f"step-{step} (verified on {count} nodes)" if step is not None else
        "step 0 (no checkpoint committed and verified on every node: from scratch)"
    )  # fmt: skip
    choice = {"step": step, "where": where, "retry": retry is not None,
              "lines": ([retry] if retry else []) + [storage] + lines}  # fmt: skip
    specs = [dict(r["spec"], rdzv_endpoint=e) for r, e in zip(read, endpoints, strict=True)]
    # Node 0 first, under its job lock: a second watcher resuming the same attempt stops here.
    first = {**choice, "after_attempt": len(attempts_of(read[0]))}
    record = nodes[0].prepare_resume(job_id, specs[0], first)
    others = list(range(1, count))
    prepared = in_parallel(lambda k: nodes[k].prepare_resume(job_id, specs[k], choice), others)
    _or_cancel(target, job_id, prepared)
    pids = in_parallel(lambda k: nodes[k].start(job_id), list(range(count)))
    _or_cancel(target, job_id, pids)
    for entry_node, pid in zip(target.entry.nodes, pids, strict=True):
        entry_node["pid"] = pid
    target.entry.pid = pids[0]
    target.entry.retry_refused = None
    registry.save(target.entry)
    record["host"] = ", ".join(n.host for n in nodes)
    return record


def _or_cancel(target: Any, job_id: str, results: list[Any]) -> None:
    """No half-resumed job keeps running: a node that failed cancels every node."""
    broken = [r for r in results if isinstance(r, Exception)]
    if broken:
        try:
            target.cancel(job_id)
        except VeriError:
            pass  # the first failure is the one to report
        raise broken[0]


def retries_done(record: JobRecord) -> int:
    """Retries since the job's last start (launch or resume): the trailing `retry` attempts."""
    done = 0
    for attempt in reversed(attempts_of(record)):
        if not attempt.get("retry"):
            break
        done += 1
    return done


def retry_due(record: JobRecord, entry: registry.RegistryEntry) -> bool:
    """The gathered record failed for the platform (RANK_LOST, COMM_ERROR, HARDWARE_ERROR,
    RANK_HUNG), every node has ended, and `max_restarts` leaves a restart; not again after
    a retry of this attempt was refused."""
    if record.get("status") != FAILED or not retryable(record.get("error")):
        return False
    if entry.retry_refused and entry.retry_refused == str(len(attempts_of(record))):
        return False
    return retries_done(record) < max_restarts(record.get("spec") or {}, alone=False)


def retry(target: Any, job_id: str, record: JobRecord) -> JobRecord:
    """Restart every node after a platform failure, if still due once this reader holds
    the lock (another may have just done it); the record after."""
    with job_lock(registry.registry_dir() / f"{job_id}.json"):
        target.refresh_entry()
        record = target.get_job(job_id, retry=False)
        if not retry_due(record, target.entry):
            return record
        limit = max_restarts(record.get("spec") or {}, alone=False)
        code = (record.get("error") or {}).get("code", "UNKNOWN")
        line = (f"retry: {code} (platform) ended the attempt; restart "
                f"{retries_done(record) + 1} of {limit} (max_restarts)")  # fmt: skip
        try:
            resume_nodes(target, job_id, retry=line)
        except Exception as exc:  # noqa: BLE001 - a retry that fails must not break a read
            # Said once, in the job's log, and kept in the registry: each later read would
            # only fail the same way.
            target.entry.retry_refused = str(len(attempts_of(record)))
            registry.save(target.entry)
            target.nodes[0].append_log(job_id, f"retry: not possible ({exc}); the job stays failed")
            return record
        return target.get_job(job_id, retry=False)
