"""The typed handle of a submitted job: what a Backend's `submit` returns and the registry
keeps (registry.py's entry has the same shape in JSON, so existing entries read as before).

A `JobRef` names the backend that runs the job, the kind of its hosts (`local`, `ssh`,
`slurm`: what reopens them), the job id and its nodes, node 0 first. A `NodeRef` is one
node: its host as the registry keeps it, its job folder there and its handle, an opaque
string only its backend reads: the supervisor's pid for `direct`, the Slurm job id for
`slurm` (None: not started).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class NodeRef:
    """One node of a submitted job: its host, its job folder there, its handle."""

    host: str
    job_dir: str
    handle: str | None = None


@dataclass(frozen=True)
class JobRef:
    """A submitted job: its backend, its hosts' kind, its id and its nodes (node 0 first)."""

    backend: str
    kind: str
    job_id: str
    nodes: tuple[NodeRef, ...]

    @property
    def handles(self) -> list[str | None]:
        """Every node's handle, node 0 first."""
        return [n.handle for n in self.nodes]

    def started(self, handles: Sequence[str | None]) -> JobRef:
        """The same job with every node's handle replaced (a resume's new supervisors)."""
        nodes = tuple(replace(n, handle=h) for n, h in zip(self.nodes, handles, strict=True))
        return replace(self, nodes=nodes)


class SubmitError(Exception):
    """A node of the job could not be started: ``ref`` says which ones were (their handles
    set, the others' None), so the caller can end them; ``cause`` is the first failure."""

    def __init__(self, ref: JobRef, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.ref = ref
        self.cause = cause
