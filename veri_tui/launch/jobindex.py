"""Where a job's target comes from: the folder of a job on this machine, the registry entry
of one launched over SSH, or a job just created (launching.py registers it).

A folder under $VERI_HOME/jobs is this machine's job (`LocalHost`); an entry of the registry
(registry.py) names an SSH job's hosts and folders, or a Slurm job's login node, opened on
first use by the backend of its kind (backends/: `SshHost`, `SlurmHost`, imported only then).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jobfolder.layout import JOB_FILE
from jobfolder.record import JobRecord
from veri_tui.errors import NotFoundError
from veri_tui.launch import registry
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
        return JobTarget(job_id, [Node(local, str(folder))], None)
    entry = registry.load(job_id)
    return None if entry is None else target_of_entry(entry, pool)


def target_of_entry(entry: registry.RegistryEntry, pool: dict[str, Host] | None = None
             ) -> JobTarget:  # fmt: skip
    """The target of a job launched over SSH or with Slurm (its hosts opened on first use)."""
    pool = {} if pool is None else pool
    nodes = []
    for n in entry.node_entries():
        key = f"{entry.kind}:{n['host']}"
        if key not in pool:
            pool[key] = _reopen(entry, n["host"])
        nodes.append(Node(pool[key], n["job_dir"], n["pid"]))
    return JobTarget(entry.job_id, nodes, entry)


def _reopen(entry: registry.RegistryEntry, name: str) -> Host:
    """The host ``name`` of the entry's kind (its backend's), connected on first use."""
    from veri_tui.launch.backends import backend_of

    return backend_of(entry.kind).reopen(name, entry.python)


def register(job_id: str, hosts: Sequence[Host], dirs: list[str],
             started: list[int | Exception], record: JobRecord) -> JobTarget:  # fmt: skip
    """The target of a job just created; one over SSH or with Slurm is entered in the
    registry (a Slurm job also when its login node is this machine)."""
    pids = [p if isinstance(p, int) else None for p in started]
    nodes = [Node(h, d, p) for h, d, p in zip(hosts, dirs, pids, strict=True)]
    if hosts[0].label is None:
        return JobTarget(job_id, nodes, None)  # this machine: its folder is the entry
    many = len(nodes) > 1
    entry = registry.RegistryEntry(
        job_id, hosts[0].name, dirs[0], pids[0], hosts[0].python, record,
        [{"host": n.host.name, "job_dir": n.job_dir, "pid": n.pid} for n in nodes]
        if many else None, kind=hosts[0].kind,
    )  # fmt: skip
    registry.save(entry)
    return JobTarget(job_id, nodes, entry)
