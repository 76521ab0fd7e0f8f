"""The list of jobs (`veri-tui jobs`, the app's jobs screen): this machine's folders, newest
first, then the registry's entries (jobindex.py opens each), each read by its backend's
`state`; the facade (jobs.py) re-exports `list_jobs` and `local_jobs`.

A job whose host cannot be reached is listed from the last record seen (`stale: true`), and
a host found unreachable is not asked again for the next job of the list.
"""

from __future__ import annotations

from veri_tui.errors import UnreachableError, VeriError
from veri_tui.jobfolder.contract.layout import JOB_FILE
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import outcome_recorded
from veri_tui.launch import registry
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.host import Host
from veri_tui.launch.jobindex import local_node, target_of_entry
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.target import JobTarget


def list_jobs(settle: bool = False) -> list[JobRecord]:
    """Jobs on this machine, newest first, then those launched over SSH, each read from its
    hosts (an ended one from its last record). A job whose host cannot be reached is listed
    from the last record seen, with `stale: true`. Writes nothing, unless ``settle``: then
    each job read is kept as a poll keeps it (`veri-tui jobs`, the app's list; settle.py)."""
    jobs: list[JobRecord] = []
    pool: dict[str, Host] = {}
    targets = _local_targets() + [target_of_entry(e, pool) for e in registry.all_jobs()]
    down: set[str] = set()
    for target in targets:
        entry = target.entry
        cached: JobRecord = {**entry.record, "host": entry.label} if entry else {}
        if entry is not None and outcome_recorded(cached):
            jobs.append(cached)
            continue
        try:
            if entry is not None and {n.host.machine.name for n in target.nodes} & down:
                raise UnreachableError("unreachable")
            jobs.append(JobHandle(target).poll() if settle else target.backend.state(target))
        except VeriError:
            if entry is None:
                continue  # a foreign or damaged folder must not hide the other jobs
            if len(target.nodes) == 1:
                down.add(entry.host)  # unreachable: do not wait on it for every job
            cached["stale"] = True
            jobs.append(cached)
    for host in pool.values():
        host.machine.close()
    return jobs


def _local_targets() -> list[JobTarget]:
    """This machine's jobs, newest first (ids sort by creation time)."""
    local = LocalHost()
    folder = local.home / "jobs"
    found = sorted(folder.iterdir(), reverse=True) if folder.is_dir() else []
    return [JobTarget(d.name, [local_node(local, d)], None) for d in found
            if not d.name.startswith(".") and (d / JOB_FILE).is_file()]  # fmt: skip


def local_jobs() -> list[JobRecord]:
    """The jobs on this machine, newest first; writes nothing."""
    out: list[JobRecord] = []
    for target in _local_targets():
        try:
            out.append(target.backend.state(target))
        except VeriError:
            continue  # a foreign or damaged folder must not hide the other jobs
    return out
