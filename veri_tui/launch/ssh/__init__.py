"""Jobs on a GPU machine reached by SSH (paramiko): hosts, host keys, preflight, remote jobs.

The seam with the launch facade (docs/jobs.md): `launch(job_config, plan_record, host=...,
trust_host=..., wait=...) -> job_id`, `preflight_rows(job_config, host=..., trust_host=...) ->
(check, ok, detail) rows`, `list_jobs() -> records` (each with `host` set) and
`target_for_job(job_id) -> RemoteTarget | None`. Details in docs/ssh.md.
"""

from __future__ import annotations

from jobfolder.record import JobRecord
from jobfolder.status import outcome_recorded
from veri_tui.errors import VeriError
from veri_tui.launch.ssh import registry
from veri_tui.launch.ssh.checks import plan_on_host, preflight_rows
from veri_tui.launch.ssh.hostkeys import ChangedHostKeyError, UnknownHostKeyError
from veri_tui.launch.ssh.launch import launch
from veri_tui.launch.ssh.multinode_state import MultiNodeTarget
from veri_tui.launch.ssh.target import RemoteTarget

__all__ = [
    "ChangedHostKeyError",
    "MultiNodeTarget",
    "RemoteTarget",
    "UnknownHostKeyError",
    "launch",
    "list_jobs",
    "plan_on_host",
    "preflight_rows",
    "target_for_job",
]


def target_for_job(job_id: str) -> RemoteTarget | MultiNodeTarget | None:
    """The SSH target of a job this machine launched over SSH, None for any other id."""
    job = registry.load(job_id)
    if job is not None and job.nodes:
        return MultiNodeTarget(job)
    return RemoteTarget(job.host) if job is not None else None


def list_jobs() -> list[JobRecord]:
    """Every remote job launched from here, newest first, refreshed from its host.

    A job whose host cannot be reached is listed from the last record seen, with
    `stale: true`; jobs already ended are not asked again.
    """
    out: list[JobRecord] = []
    targets: dict[str, RemoteTarget | None] = {}
    for job in registry.all_jobs():
        record: JobRecord = {**job.record, "host": job.host}
        if job.nodes and not outcome_recorded(record):
            multi = MultiNodeTarget(job)
            try:
                record = multi.get_job(job.job_id)
            except VeriError:
                record["stale"] = True
            multi.close()
        elif not outcome_recorded(record):
            if job.host not in targets:
                targets[job.host] = RemoteTarget(job.host)
            target = targets[job.host]
            try:
                if target is None:
                    raise VeriError("unreachable", key="host")
                record = target.get_job(job.job_id)
            except VeriError:
                targets[job.host] = None  # unreachable: do not wait on it for every job
                record["stale"] = True
        out.append(record)
    for target in targets.values():
        if target is not None:
            target.close()
    return out
