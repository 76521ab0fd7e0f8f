"""The open job: one job over N hosts, its nodes' hosts connected for a reader's life.

A `JobTarget` is plain data: the job's id, its nodes (`Node`: a `Host`, the job folder there,
the node's handle, an opaque string its backend reads), its registry entry (None for a job on
this machine) and the name of its backend. Everything done to it is its backend's operation
(backends/api.py: `state`, `logs`, `follow`, `cancel`, `prepare`, `resume`, `submit`) or the
bookkeeping of this machine's registry on it (registry.py `remember`, `adopt`; retries.py
`settled`; watching.py, the multi-node job's watcher); the facade's `JobHandle` (handle.py)
calls them. jobindex.py finds a job's target: a folder under $VERI_HOME/jobs is this
machine's, an entry of the registry (registry.py) one launched over SSH or with Slurm.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from veri_tui.jobfolder.contract.layout import JOB_FILE
from veri_tui.launch.backends.ref import JobRef, NodeRef

if TYPE_CHECKING:
    from veri_tui.launch.host import Host
    from veri_tui.launch.registry import RegistryEntry


@dataclass
class Node:
    """One node of a job: its host, its job folder there, its handle (opaque: the supervisor's
    pid seen at its start, or the scheduler's job id; None: not started)."""

    host: Host
    job_dir: str
    handle: str | None = None

    @property
    def job_file(self) -> str:
        return posixpath.join(self.job_dir, JOB_FILE)


@dataclass
class JobTarget:
    """One job, on its N nodes (node 0 holds rank 0: its log, its artifact), run by the
    backend named ``backend``."""

    job_id: str
    nodes: list[Node]
    entry: RegistryEntry | None
    backend: str

    @property
    def name(self) -> str:
        """The job's place in messages: node 0's host, or the registry entry's `kind:host`."""
        if self.entry is None:
            return self.nodes[0].host.machine.name
        return f"{self.entry.kind}:{self.entry.host}"

    @property
    def ref(self) -> JobRef:
        """The job's typed handle as its nodes hold it now."""
        nodes = tuple(NodeRef(n.host.machine.name, n.job_dir, n.handle) for n in self.nodes)
        return JobRef(self.backend, self.nodes[0].host.kind, self.job_id, nodes)

    def close(self) -> None:
        """Close the nodes' hosts (their SSH connections)."""
        for node in self.nodes:
            node.host.machine.close()
