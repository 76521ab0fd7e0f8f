"""The registry: this machine's list of the jobs it launched over SSH, for `veri-tui jobs`.

One small file per job, `$VERI_HOME/remote/<job_id>.json`, a registry entry
(`RegistryEntry`): the host as the user typed it, the remote job folder, the node's handle
(its backend's opaque string: the supervisor's pid, a Slurm job id) and the job record last
read from the host (shown, marked stale, when the host cannot be
reached); a multi-node job's nodes and the pid of its watcher (watcher.py). A Slurm job
(`kind` "slurm") is entered too, also when its login node is this machine: `host` is the
login node, `handle` the Slurm job id. An entry written before handles were strings keeps
each node's as `pid` (an int): `load` reads it as the handle. Jobs on this machine are not
entered here: their folders under `$VERI_HOME/jobs/` are their own list.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypedDict

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import veri_home
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.launch.backends import backend_of
from veri_tui.launch.backends.ref import JobRef, NodeRef


class NodeEntry(TypedDict):
    """One node of a multi-node job: its host, its job folder there, its handle."""

    host: str
    job_dir: str
    handle: str | None


@dataclass
class RegistryEntry:
    """A registry entry: where a remote job lives and its job record as last read."""

    job_id: str
    host: str
    job_dir: str
    handle: str | None
    python: str
    record: JobRecord
    #: A multi-node job's nodes, node 0 first (host, job_dir and handle above are node 0's);
    #: None for a one-host job.
    nodes: list[NodeEntry] | None = None
    #: A multi-node job whose platform retry could not start: the number of attempts it had
    #: then (so its watcher does not try again for that attempt); None otherwise.
    retry_refused: str | None = None
    #: A multi-node job's watcher on this machine (its pid), while one was started.
    watcher: int | None = None
    #: The host's kind (`ssh`, or `slurm`: `host` is the login node, `handle` the Slurm job id).
    kind: str = "ssh"

    @property
    def label(self) -> str:
        """The host as job records name it (`slurm:<login>` for a Slurm job): its backend's."""
        return backend_of(self.kind).label(self.host)

    @property
    def ref(self) -> JobRef:
        """The job's typed handle (what its backend's `submit` returned)."""
        nodes = tuple(NodeRef(n["host"], n["job_dir"], n["handle"]) for n in self.node_entries())
        return JobRef(backend_of(self.kind).name, self.kind, self.job_id, nodes)

    def node_entries(self) -> list[NodeEntry]:
        """Every node, node 0 first (a one-host job is its one node)."""
        if self.nodes:
            return self.nodes
        return [{"host": self.host, "job_dir": self.job_dir, "handle": self.handle}]


def entry_of(ref: JobRef, python: str, record: JobRecord) -> RegistryEntry:
    """The entry of a job just submitted (``ref``): node 0's host, folder and handle at the
    top, every node's in `nodes` when there are several (the shape entries always had)."""
    first = ref.nodes[0]
    nodes: list[NodeEntry] | None = None
    if len(ref.nodes) > 1:
        nodes = [{"host": n.host, "job_dir": n.job_dir, "handle": n.handle} for n in ref.nodes]
    return RegistryEntry(ref.job_id, first.host, first.job_dir, first.handle, python, record,
                         nodes, kind=ref.kind)  # fmt: skip


def registry_dir() -> Path:
    """`$VERI_HOME/remote`."""
    return veri_home() / "remote"


def entry_path(job_id: str) -> Path:
    """The entry's file (also the lock that one change of the job at a time holds)."""
    return registry_dir() / f"{job_id}.json"


def save(job: RegistryEntry) -> None:
    """Write (or refresh) the entry, atomically."""
    registry_dir().mkdir(parents=True, exist_ok=True)
    write_json_atomic(entry_path(job.job_id), asdict(job))


def load(job_id: str) -> RegistryEntry | None:
    """The entry for `job_id`, None when this machine did not launch it over SSH."""
    if not job_id or "/" in job_id or job_id.startswith("."):
        return None
    try:
        data: dict[str, Any] = json.loads(entry_path(job_id).read_text(encoding="utf-8"))
        for node in [data, *(data.get("nodes") or [])]:
            _handle_of_pid(node)
        return RegistryEntry(**data)
    except (OSError, ValueError, TypeError):
        return None


def _handle_of_pid(node: dict[str, Any]) -> None:
    """An entry (or node) written before handles were strings: its `pid` is the handle."""
    if "pid" in node:
        pid = node.pop("pid")
        node["handle"] = None if pid is None else str(pid)


def all_jobs() -> list[RegistryEntry]:
    """Every entry, newest first (job ids sort by creation time)."""
    folder = registry_dir()
    if not folder.is_dir():
        return []
    found = (load(p.stem) for p in sorted(folder.glob("*.json"), reverse=True))
    return [job for job in found if job is not None]
