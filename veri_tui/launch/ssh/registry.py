"""The registry: this machine's list of the jobs it launched over SSH, for `veri-tui jobs`.

One small file per job, `$VERI_HOME/remote/<job_id>.json`, a registry entry
(`RegistryEntry`): the host as the user typed it, the remote job folder, the supervisor pid
and the job record last read from the host (shown, marked stale, when the host cannot be
reached). Remote jobs are not put under `$VERI_HOME/jobs/`, whose folders the local target
owns and judges by local pids.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jobfolder.atomic import write_json_atomic
from jobfolder.layout import veri_home
from jobfolder.record import JobRecord


@dataclass
class RegistryEntry:
    """A registry entry: where a remote job lives and its job record as last read."""

    job_id: str
    host: str
    job_dir: str
    pid: int | None
    python: str
    record: JobRecord
    #: A multi-node job's nodes, node 0 first: {host, job_dir, pid} each (host, job_dir
    #: and pid above are node 0's); None for a one-host job.
    nodes: list[dict[str, Any]] | None = None
    #: A multi-node job whose platform retry could not start: the number of attempts it had
    #: then (so readers do not try again for that attempt); None otherwise.
    retry_refused: str | None = None


def registry_dir() -> Path:
    return veri_home() / "remote"


def save(job: RegistryEntry) -> None:
    """Write (or refresh) the entry, atomically."""
    registry_dir().mkdir(parents=True, exist_ok=True)
    write_json_atomic(registry_dir() / f"{job.job_id}.json", asdict(job))


def load(job_id: str) -> RegistryEntry | None:
    """The entry for `job_id`, None when this machine did not launch it over SSH."""
    if not job_id or "/" in job_id or job_id.startswith("."):
        return None
    try:
        data = json.loads((registry_dir() / f"{job_id}.json").read_text(encoding="utf-8"))
        return RegistryEntry(**data)
    except (OSError, ValueError, TypeError):
        return None


def all_jobs() -> list[RegistryEntry]:
    """Every entry, newest first (job ids sort by creation time)."""
    folder = registry_dir()
    if not folder.is_dir():
        return []
    found = (load(p.stem) for p in sorted(folder.glob("*.json"), reverse=True))
    return [job for job in found if job is not None]
