"""The launch facade used by the CLI and the app: start, list, read, follow, cancel and
resume jobs (a resume is a new attempt of an ended job in its own folder).

A job runs on N hosts (host.py) of a backend (backends/: the registry chooses it from where
the job goes): none given is this machine, one SSH host is a one-host job, several are one
multi-node job (one node each, node 0 first) of the `direct` backend; `SlurmOptions` (a
login node and its partition, nodes, ...) is the `slurm` backend's, submitted as a batch
job (docs/slurm.md). Every call below is the same code for all of them: the one launch
sequence (launching.py, which calls the backend's `probe` and `submit`), the one preflight
(preflight.py), and for a job launched before, its backend's operations (`state`, `logs`,
`follow`, `cancel`) on the open job (handle.py; jobindex.py finds a job, joblist.py lists
them). paramiko is imported only once a host is used. The app reaches the launch side
through this module alone (an import-linter contract in .ci/run); docs/architecture.md
draws the seams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.procs import pid_alive
from veri_tui.jobfolder.contract.record import JobRecord, pending_reason, scheduler_of
from veri_tui.launch import backends, registry
from veri_tui.launch.backends import Destination, Option
from veri_tui.launch.backends.api import AnyBackend
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.host import Row, row_text
from veri_tui.launch.jobindex import job_location, target_for
from veri_tui.launch.joblist import list_jobs, local_jobs
from veri_tui.launch.loglines import LogLine
from veri_tui.launch.measured import comparison_lines
from veri_tui.launch.metrics import log_row, metric_of
from veri_tui.launch.probe.fleet import ProbeChoice
from veri_tui.launch.slurm.options import SlurmOptions
from veri_tui.launch.spec import canary_spec

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

__all__ = [
    "JobHandle", "LogLine", "Option", "ProbeChoice", "Row", "SlurmOptions", "backend_named",
    "backend_options", "backends_shown", "cancel",
    "canary_spec", "comparison_lines", "dry_run", "follow_log", "get_job", "host_aliases",
    "job_location", "launch", "list_jobs", "local_jobs", "log_row", "metric_of", "open",
    "pending_reason", "preflight", "read_log", "resume", "row_text", "scheduler_of",
    "target_for", "trace", "trace_lines", "trust_key", "watch", "watcher_of",
    "where_of",
]  # fmt: skip

#: Where a job runs: this machine (None), an SSH host, several (a multi-node job), or any
#: backend's destination (`where_of`: what its options make, `SlurmOptions` for Slurm).
Where = object


def _dest(host: Where, job: JobConfig | None = None) -> Destination[object]:
    """The job's destination (backends/): the backend that takes ``host`` (None: the job's
    own `hosts`, else this machine)."""
    return backends.destination(host, job)


def where_of(name: str, values: dict[str, object]) -> Where:
    """Backend ``name``'s destination from its options' values (the app's fields, by option
    name; what the command line's flags give); VeriError for a bad value."""
    return backends.named(name).where_from(values, None, None)


def backend_options(name: str) -> tuple[Option, ...]:
    """The options backend ``name`` declares (the app's launch-screen fields)."""
    return backends.options_of(name)


def backend_named(name: str) -> AnyBackend:
    """The backend registered as ``name``; VeriError for an unknown one."""
    return backends.named(name)


def backends_shown() -> list[AnyBackend]:
    """Every backend, `direct` first: the app's scheduler choices."""
    return backends.backends()


def launch(
    job_config: JobConfig,
    plan_record: PlanRecord | None,
    host: Where = None,
    trust_host: str | None = None,
    wait: bool = False,
    probe: ProbeChoice | None = None,
    canary: dict[str, object] | None = None,
    say: Callable[[str], None] = lambda line: None,
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
    ``say``: where the ranks will run (`device: 2 CUDA GPUs ...`, or `warning: no CUDA GPU
    ...: the job runs 2 CPU processes (gloo) instead of the planned ...`), before it starts.
    """
    from veri_tui.launch.launching import launch as run_launch

    return run_launch(job_config, plan_record, _dest(host), trust_host, wait,
                      probe=probe or ProbeChoice(), canary=canary, say=say)  # fmt: skip


def dry_run(job_config: JobConfig, host: Where, trust_host: str | None = None,
            probe: ProbeChoice | None = None) -> str:  # fmt: skip
    """What `launch` would submit for ``job_config`` to ``host`` (a Slurm job: its batch
    script), every check of a launch made, every refusal raised (``probe``: its probe
    step's mode); nothing is created or submitted. VeriError at once for a backend that
    submits nothing (this machine, SSH)."""
    from veri_tui.launch.launching import launch as run_launch

    dest = _dest(host, job_config)
    dest.backend.check_dry_run()
    return run_launch(job_config, None, dest, trust_host, wait=False,
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

    return run_preflight(job_config, plan_record, _dest(host, job_config), trust_host)


def plan_on(job: JobConfig, host: Where, trust_host: str | None = None
            ) -> PlanRecord:  # fmt: skip
    """The plan `launch` would make on these hosts (`veri-tui plan --host`), or for a Slurm
    partition (`veri-tui plan --slurm LOGIN --partition P`)."""
    from veri_tui.launch.launching import plan_on as run_plan

    plan: PlanRecord = run_plan(job, _dest(host), trust_host)
    return plan


def open(job_id: str) -> JobHandle:  # noqa: A001 - `jobs.open`, as the facade's reader
    """The job held open for a reader's life, one connection per host:
    `with jobs.open(job_id) as job:` (handle.py). VeriError for an unknown id."""
    return JobHandle(target_for(job_id))


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


def trace(job: JobConfig, rec: PlanRecord) -> dict[str, object]:
    """The bundled trainer's own step traced at the job's real shapes on fake CUDA, in a
    child process (veri_tui/launch/tracing.py); VeriError with one line when it cannot."""
    from veri_tui.launch.tracing import trace_job

    return trace_job(job, rec)


def trace_lines(traced: dict[str, object], rec: PlanRecord) -> list[str]:
    """The trace's summary line (beside the plan's peak) and its phase table."""
    from veri_tui.launch.tracing import trace_line, trace_table

    return [trace_line(traced, rec), *trace_table(traced)]
