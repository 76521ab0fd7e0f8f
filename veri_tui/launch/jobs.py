"""The launch facade used by the CLI and the app: start, list, read, follow, cancel and
resume jobs (a resume is a new attempt of an ended job in its own folder).

A job runs on N hosts (host.py) of a backend (backends/: the registry chooses it from where
the job goes): none given is this machine, one SSH host is a one-host job, several are one
multi-node job (one node each, node 0 first) of the `direct` backend; `SlurmOptions` (a
login node and its partition, nodes, ...) is the `slurm` backend's, submitted as a batch
job (docs/slurm.md).
Every call below is the same
code for all of them: the one launch sequence (launching.py), the one preflight
(preflight.py) and the one job target (target.py). paramiko is imported only once a host
is used. The app reaches the launch side through this module alone (an import-linter
contract in .ci/run); docs/architecture.md draws the seams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from jobfolder.layout import JOB_FILE
from jobfolder.procs import pid_alive
from jobfolder.record import JobRecord
from jobfolder.status import outcome_recorded
from veri_tui.errors import NotFoundError, UnreachableError, VeriError
from veri_tui.launch import backends, registry
from veri_tui.launch.backends import Option
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.host import Host, Row
from veri_tui.launch.hostpool import HostName
from veri_tui.launch.jobindex import target_for_job, target_of_entry
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.measured import comparison_lines
from veri_tui.launch.metrics import log_row, metric_of
from veri_tui.launch.probe.fleet import ProbeChoice
from veri_tui.launch.records import LogLine
from veri_tui.launch.slurm.options import SlurmOptions, slurm_options
from veri_tui.launch.slurm.states import pending_reason, slurm_state
from veri_tui.launch.spec import canary_spec
from veri_tui.launch.target import JobTarget, Node

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

__all__ = [
    "JobHandle", "LogLine", "ProbeChoice", "Row", "cancel", "canary_spec", "comparison_lines",
    "follow_log", "get_job", "host_aliases", "launch", "list_jobs", "local_jobs", "log_row",
    "metric_of", "open", "pending_reason", "preflight", "read_log", "resume", "SlurmOptions",
    "slurm_options", "dry_run", "backend_options", "slurm_state", "target_for", "trust_key",
    "watch", "watcher_of",
]  # fmt: skip

#: Where a job runs: this machine (None), an SSH host, several (a multi-node job), or Slurm.
Where = str | Sequence[str] | SlurmOptions | None


def _names(host: Where, job: JobConfig | None = None) -> list[HostName]:
    """The job's hosts, as its backend names them (backends/): the Slurm login, the one
    named, the list given, else the job's own (`hosts`), else this machine."""
    return backends.host_names(host, job)


def backend_options(name: str) -> tuple[Option, ...]:
    """The options backend ``name`` declares (the app's launch-screen fields)."""
    return backends.options_of(name)


def launch(
    job_config: JobConfig,
    plan_record: PlanRecord | None,
    host: Where = None,
    trust_host: str | None = None,
    wait: bool = False,
    probe: ProbeChoice | None = None,
    canary: dict[str, Any] | None = None,
) -> str:
    """Validate, write the job folder(s) and start the job detached; returns the job id.

    Raises VeriError for anything `plan` refuses, a model not on disk or a missing dataset,
    and every problem its hosts show, before anything starts. ``wait`` blocks until the job
    has ended. ``plan_record`` None: planned here; with ``host`` the job is always planned
    on what the host has (after its preflight), and ``plan_record`` is not used.
    ``host`` a `SlurmOptions`: submitted with sbatch from its login node, planned for its
    partition; the registry entry and job.json keep the Slurm job id. A multi-node job's
    nodes are probed first (``probe``: skip it, or go on past a slow node; docs/probe.md).
    ``canary``: the spec's `canary` (steps and the gate's limits, docs/canary.md).
    """
    from veri_tui.launch.launching import launch as run_launch

    return run_launch(job_config, plan_record, _names(host), trust_host, wait,
                      probe=probe or ProbeChoice(), canary=canary)  # fmt: skip


def dry_run(job_config: JobConfig, host: Where, trust_host: str | None = None,
            probe: ProbeChoice | None = None) -> str:  # fmt: skip
    """What `launch` would submit for ``job_config`` to ``host`` (a Slurm job: its batch
    script), every check of a launch made, every refusal raised (``probe``: its probe
    step's mode); nothing is created or submitted. VeriError at once for a backend that
    submits nothing (this machine, SSH)."""
    from veri_tui.launch.launching import launch as run_launch

    backends.backend_for(host).check_dry_run()
    return run_launch(job_config, None, _names(host, job_config), trust_host, wait=False,
                      dry_run=True, probe=probe)  # fmt: skip


def preflight(
    job_config: JobConfig,
    plan_record: PlanRecord | None = None,
    host: Where = None,
    trust_host: str | None = None,
) -> list[Row]:
    """What `launch` would check, starting nothing: (check, ok, detail) rows, every
    refusal a row with ok False (preflight.py). Several hosts (a list, else the job's
    `hosts`): every node's rows, labelled `node <k> (<host>)`. A host that cannot be
    reached raises VeriError (UnknownHostKeyError for an unknown host key)."""
    from veri_tui.launch.preflight import preflight as run_preflight

    return run_preflight(job_config, plan_record, _names(host, job_config), trust_host)


def plan_on(job: JobConfig, host: Where, trust_host: str | None = None
            ) -> PlanRecord:  # fmt: skip
    """The plan `launch` would make on these hosts (`veri-tui plan --host`), or for a Slurm
    partition (`veri-tui plan --slurm LOGIN --partition P`)."""
    from veri_tui.launch.launching import plan_on as run_plan

    plan: PlanRecord = run_plan(job, _names(host), trust_host)
    return plan


def target_for(job_id: str) -> JobTarget:
    """The job's target: this machine's folder, else the registry's entry; VeriError for
    an id neither knows. The caller closes it (`open` does)."""
    target = target_for_job(job_id)
    if target is None:
        raise NotFoundError(f"no job {job_id}; `veri-tui jobs` lists them")
    return target


def job_location(job_id: str) -> tuple[str | None, str]:
    """(host, folder) of the job's node 0 without connecting: host None for this machine
    (a local job, or one whose folder was copied into $VERI_HOME/jobs), else the host as
    job records name it (`slurm:<login>` for Slurm); VeriError for an unknown id."""
    target = target_for(job_id)
    try:
        node = target.nodes[0]
        if isinstance(node.host, LocalHost) or target.entry is None:
            return None, node.job_dir
        return target.entry.label, node.job_dir
    finally:
        target.close()


def open(job_id: str) -> JobHandle:  # noqa: A001 - `jobs.open`, as the facade's reader
    """The job held open for a reader's life, one connection per host:
    `with jobs.open(job_id) as job:` (handle.py). VeriError for an unknown id."""
    return JobHandle(target_for(job_id))


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
            if entry is not None and {n.host.name for n in target.nodes} & down:
                raise UnreachableError("unreachable")
            jobs.append(JobHandle(target).poll() if settle else target.get_job())
        except VeriError:
            if entry is None:
                continue  # a foreign or damaged folder must not hide the other jobs
            if len(target.nodes) == 1:
                down.add(entry.host)  # unreachable: do not wait on it for every job
            cached["stale"] = True
            jobs.append(cached)
    for host in pool.values():
        host.close()
    return jobs


def _local_targets() -> list[JobTarget]:
    """This machine's jobs, newest first (ids sort by creation time)."""
    local = LocalHost()
    folder = local.home / "jobs"
    found = sorted(folder.iterdir(), reverse=True) if folder.is_dir() else []
    return [JobTarget(d.name, [Node(local, str(d))], None) for d in found
            if not d.name.startswith(".") and (d / JOB_FILE).is_file()]  # fmt: skip


def local_jobs() -> list[JobRecord]:
    """The jobs on this machine, newest first; writes nothing."""
    out: list[JobRecord] = []
    for target in _local_targets():
        try:
            out.append(target.get_job())
        except VeriError:
            continue  # a foreign or damaged folder must not hide the other jobs
    return out


def get_job(job_id: str) -> JobRecord:
    """The job's record (job.json, with a lost supervisor reported as failed); writes
    nothing (`open(job_id).poll()` keeps what it shows)."""
    with open(job_id) as job:
        return job.get_job()


def watcher_of(job_id: str) -> int | None:
    """The pid of the multi-node job's watcher on this machine, while it runs."""
    entry = registry.load(job_id)
    pid = entry.watcher if entry is not None else None
    return pid if pid is not None and pid_alive(pid) else None


def read_log(job_id: str, offset: int = 0) -> bytes:
    """The rank-0 log from byte ``offset`` to its current end."""
    with open(job_id) as job:
        return job.read_log(offset)


def follow_log(job_id: str, offset: int = 0) -> Iterator[LogLine]:
    """Complete rank-0 log lines from ``offset`` until the job ends (``LogLine.end`` is the
    offset to resume from); the job's end is kept (settle.py) once it is drained."""
    job = open(job_id)
    try:
        lines = job.follow_log(offset)
    except BaseException:
        job.close()
        raise

    def gen() -> Iterator[LogLine]:
        with job:
            yield from lines

    return gen()


def watch(
    job_id: str,
    offset: int = 0,
    on_record: Callable[[JobRecord], None] | None = None,
    stop: Callable[[], bool] | None = None,
    poll_s: float = 0.5,
) -> Iterator[LogLine]:
    """`JobHandle.watch` on a handle held for the watch's life (one connection per host):
    log lines with the record polled every ``poll_s`` and handed to ``on_record``; ends once
    the job has ended and its log is drained, or as soon as ``stop()`` is true."""
    job = open(job_id)

    def gen() -> Iterator[LogLine]:
        with job:
            yield from job.watch(offset, on_record, stop, poll_s)

    return gen()


def resume(job_id: str, gpu_count: int | None = None, sets: Sequence[str] = (),
           wait: bool = False, nodes: int | None = None) -> JobRecord:  # fmt: skip
    """A new attempt of an ended job in its own folder, from its newest verified checkpoint;
    returns the record (pending), or the final one with ``wait``.

    The same plan, unless ``gpu_count`` or ``sets`` (`KEY=VALUE`) change it: then the job is
    planned again keeping its global batch (veri_tui.launch.replan), on its host (a Slurm
    job's also for ``nodes``: its ranks per node kept unless ``gpu_count`` says). A
    multi-node job resumes on every node from the newest step committed and verified on all
    of them, on its own layout and plan (veri_tui.launch.restart). VeriError (nothing is
    changed): a job that runs or succeeded, a bad gpu_count or node count, a refused plan.
    """
    with open(job_id) as job:
        return job.resume(gpu_count, sets, wait, nodes)


def cancel(job_id: str) -> JobRecord:
    """End every rank of the job; returns the final record (status cancelled unless it had
    already ended)."""
    with open(job_id) as job:
        return job.cancel()


def host_aliases() -> list[str]:
    """The host aliases of the SSH client config (wildcard patterns are not targets)."""
    from veri_tui.launch.ssh.hosts import load_config

    return sorted(h for h in load_config().get_hostnames() if not set("*?!") & set(h))


def trust_key(hosts: Sequence[str], fingerprint: str) -> None:
    """Record a host key the user accepted: the host whose key it is records it in
    known_hosts, the others refuse it (so each unknown host is asked about once)."""
    from veri_tui.launch.ssh.connection import Connection

    for host in hosts:
        try:
            Connection.open(host, trust=fingerprint).close()
        except VeriError:
            pass
