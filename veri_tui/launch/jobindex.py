"""Where a job's target comes from, and the list of jobs: the folder of a job on this
machine, the registry entry of one launched over SSH or with Slurm, or a job just submitted
(launching.py registers its backend's handle).

A folder under $VERI_HOME/jobs is this machine's job (`LocalHost`); an entry of the registry
(registry.py) names an SSH job's hosts and folders, or a Slurm job's login node, opened on
first use by the backend of its kind (backends/: `SshHost`, `SlurmHost`, imported only then).
joblist.py lists every job so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from veri_tui.errors import NotFoundError
from veri_tui.jobfolder.contract.layout import JOB_FILE, SUPERVISOR_PID
from veri_tui.jobfolder.contract.procs import read_pid
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.launch import registry
from veri_tui.launch.backends import backend_of
from veri_tui.launch.backends.ref import JobRef, NodeRef
from veri_tui.launch.host import Host
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.target import JobTarget, Node


def target_for_job(job_id: str, pool: dict[str, Host] | None = None) -> JobTarget | None:
    """The target of ``job_id``: this machine's folder, else its registry entry; None
    for an id neither knows. ``pool``: hosts already open, shared (and added to)."""
    local = LocalHost()
    if not job_id or "/" in job_id or job_id.startswith("."):
        raise NotFoundError(f"{job_id!r} is not a job id; `veri-tui jobs` lists them")
    folder = Path(local.home) / "jobs" / job_id
    if (folder / JOB_FILE).is_file():
        return JobTarget(job_id, [local_node(local, folder)], None, backend_of(local.kind).name)
    entry = registry.load(job_id)
    return None if entry is None else target_of_entry(entry, pool)


def local_node(local: LocalHost, folder: Path) -> Node:
    """A job folder on this machine as a node: its handle is the supervisor's pid file (the
    folder is its own registry entry)."""
    pid = read_pid(folder / SUPERVISOR_PID)
    return Node(local, str(folder), None if pid is None else str(pid))


def target_of_entry(entry: registry.RegistryEntry, pool: dict[str, Host] | None = None
                    ) -> JobTarget:  # fmt: skip
    """The target of a job launched over SSH or with Slurm (its hosts opened on first use)."""
    pool = {} if pool is None else pool
    nodes = []
    for n in ref_of(entry).nodes:
        key = f"{entry.kind}:{n.host}"
        if key not in pool:
            pool[key] = _reopen(entry, n.host)
        nodes.append(Node(pool[key], n.job_dir, n.handle))
    return JobTarget(entry.job_id, nodes, entry, backend_of(entry.kind).name)


def ref_of(entry: registry.RegistryEntry) -> JobRef:
    """The entry's job as its typed handle (what its backend's `submit` returned)."""
    nodes = tuple(NodeRef(n["host"], n["job_dir"], n["handle"]) for n in entry.node_entries())
    return JobRef(backend_of(entry.kind).name, entry.kind, entry.job_id, nodes)


def label_of(entry: registry.RegistryEntry) -> str:
    """The entry's host as job records name it (`slurm:<login>` for a Slurm job)."""
    return backend_of(entry.kind).label(entry.host)


def _reopen(entry: registry.RegistryEntry, name: str) -> Host:
    """The host ``name`` of the entry's kind (its backend's), connected on first use."""
    return backend_of(entry.kind).reopen(name, entry.python)


def register(ref: JobRef, hosts: Sequence[Host], record: JobRecord) -> JobTarget:
    """The target of a job just submitted (``ref``: its backend's handle); one over SSH or
    with Slurm is entered in the registry (a Slurm job also when its login node is this
    machine)."""
    nodes = [Node(h, n.job_dir, n.handle) for h, n in zip(hosts, ref.nodes, strict=True)]
    if hosts[0].label is None:
        return JobTarget(ref.job_id, nodes, None, ref.backend)  # this machine: its folder
    entry = entry_of(ref, hosts[0].machine.python, record)
    registry.save(entry)
    return JobTarget(ref.job_id, nodes, entry, ref.backend)


def target_for(job_id: str) -> JobTarget:
    """The job's target: this machine's folder, else the registry's entry; VeriError for
    an id neither knows. The caller closes it (`open` does)."""
    target = target_for_job(job_id)
    if target is None:
        raise NotFoundError(f"no job {job_id}; `veri-tui jobs` lists them")
    return target


def job_location(job_id: str) -> tuple[tuple[str, str] | None, str]:
    """(host, folder) of the job's node 0 without connecting: host None for this machine
    (a local job, or one whose folder was copied into $VERI_HOME/jobs), else the host as
    job records name it (`slurm:<login>` for Slurm) and the machine its files are on (the
    login node); VeriError for an unknown id."""
    target = target_for(job_id)
    try:
        node = target.nodes[0]
        if isinstance(node.host, LocalHost) or target.entry is None:
            return None, node.job_dir
        return (label_of(target.entry), target.entry.host), node.job_dir
    finally:
        target.close()


def entry_of(ref: JobRef, python: str, record: JobRecord) -> registry.RegistryEntry:
    """The entry of a job just submitted (``ref``): node 0's host, folder and handle at the
    top, every node's in `nodes` when there are several (the shape entries always had)."""
    first = ref.nodes[0]
    nodes: list[registry.NodeEntry] | None = None
    if len(ref.nodes) > 1:
        nodes = [{"host": n.host, "job_dir": n.job_dir, "handle": n.handle} for n in ref.nodes]
    return registry.RegistryEntry(ref.job_id, first.host, first.job_dir, first.handle, python,
                                  record, nodes, kind=ref.kind)  # fmt: skip


def adopt(job: JobTarget, ref: JobRef) -> None:
    """Take the handles of ``ref`` (those started: a node not started keeps its own) into
    the job's nodes, and keep them in its entry."""
    for node, given in zip(job.nodes, ref.nodes, strict=True):
        if given.handle is not None:
            node.handle = given.handle
    if job.entry is not None:
        fresh = registry.load(job.job_id) or job.entry
        if fresh.nodes:
            for saved, node in zip(fresh.nodes, job.nodes, strict=True):
                saved["handle"] = node.handle
        fresh.handle = job.nodes[0].handle
        job.entry = fresh
        registry.save(fresh)
