"""The Backend registry: how a job is run, by name, the options each way declares, and the
operations every backend gives.

A Backend runs jobs on Machines it is handed (host.py: `LocalHost`, `SshHost`, the commands,
files and processes of one machine; `SlurmHost` owns its login node's): `direct` (direct.py:
the supervisor started on one or N hosts) and `slurm` (slurm.py: a batch job submitted from
a login node). Each is registered here by name with the options it takes (`Option`: name,
type, help, default); from them come the CLI's flags (`add_cli_options`, veri_tui/cli.py),
the app's launch-screen fields (`options_of`, veri_tui/app/widgets/slurm_fields.py),
veri.toml's `[<name>]` table and the `kind` kept in this machine's job registry
(registry.py). Every choice between backends is made here (`backend_for` a job's
destination, `backend_of` a host's or registry entry's kind).

A job's operations are the Backend's (`Backend` below): `probe` its hosts, `submit` its
prepared folders (a typed handle, ref.py's `JobRef`), and for the open job (target.py's
`JobTarget`: its hosts, connected) `state`, `node_state`, `cancel`, `logs` and `follow`.
The launch sequence (launching.py), the facade (jobs.py, handle.py) and a resume
(restart.py) call these; `direct` and `slurm` share their code (supervised.py).

A new backend (Kubernetes, SkyPilot): one module with a class like `SlurmBackend`, one line
in `_load`, and the conformance suite (tests/backends) run against it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from veri_tui.errors import VeriError

if TYPE_CHECKING:
    from veri_tui.jobfolder.record import JobRecord, JobSpec
    from veri_tui.launch.backends.ref import JobRef
    from veri_tui.launch.host import Host, HostFacts
    from veri_tui.launch.hostpool import HostName
    from veri_tui.launch.probe.fleet import ProbeChoice
    from veri_tui.launch.records import LogLine
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig


@dataclass(frozen=True)
class Option:
    """One option a backend takes: ``name`` is its key (veri.toml's `[<backend>]` table, the
    argparse dest), ``type`` str or int, ``help`` the flag's help. ``flag``: the CLI flag
    when not `--<name with dashes>`; ``many``: repeatable (a list); ``label``/``hint``: the
    app's field label and placeholder (None: not an app field)."""

    name: str
    type: type
    help: str
    default: object = None
    metavar: str | None = None
    flag: str | None = None
    many: bool = False
    label: str | None = None
    hint: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


class Backend(Protocol):
    """How jobs run: what the registry knows of one backend."""

    #: Its registry name (`direct`, `slurm`).
    name: str
    #: The host kinds (`Host.kind`, a registry entry's `kind`) that are this backend's.
    kinds: tuple[str, ...]
    #: The CLI's option group title (None: the command's own options).
    group: str | None
    #: Its options, in the order shown.
    options: tuple[Option, ...]
    #: Whether a launch on one of its hosts with 2 GPUs or more probes that host first
    #: (probe/fleet.py; a Slurm partition's nodes are unknown before the allocation).
    probes_one_host: bool
    #: How the CLI names its destination in a message (`--slurm`).
    given_as: str

    def where_from(
        self,
        values: Mapping[str, object],
        table: Mapping[str, object] | None,
        job: JobConfig | None,
    ) -> object:
        """Its destination from the options given (None: not given) and veri.toml's
        `[<name>]` ``table`` and job keys; None when the job is not for this backend.
        VeriError for a bad value."""

    def owns(self, where: object) -> bool:
        """Whether ``where`` (a destination the facade was given) is this backend's."""

    def host_names(self, where: object, job: JobConfig | None) -> list[HostName]:
        """The names `open_hosts` opens for ``where``, node 0 first."""

    def open_hosts(self, names: Sequence[HostName], trust: str | None) -> list[Host]:
        """The job's hosts, connected; VeriError (the first failure) when one cannot be."""

    def reopen(self, host: str, python: str) -> Host:
        """A registry entry's host ``host`` again (connected on first use)."""

    def label(self, host: str) -> str:
        """The host as job records name it."""

    def check_dry_run(self) -> None:
        """VeriError when `launch --dry-run` has nothing to print for this backend."""

    def script(self, host: Host, job_dir: str, record: JobRecord) -> str:
        """What `launch --dry-run` prints for the job in ``job_dir`` on ``host``."""

    def record_probe_mode(self, spec: JobSpec, choice: ProbeChoice) -> None:
        """Record in ``spec`` how the job's own probe of its nodes runs (a backend whose
        nodes are probed before the launch records nothing)."""

    def refuse_nodes(self, nodes: int | None) -> None:
        """VeriError when a resume's ``nodes`` cannot re-lay a job of this backend."""

    def relayout(self, host: Host, record: JobRecord, gpu_count: int | None, nodes: int | None
                 ) -> tuple[int | None, bool]:  # fmt: skip
        """Ready ``host`` to re-plan a resume of ``record``: the rank count to plan for and
        whether the layout changed (the plan is then made again whatever else changed)."""

    # -- the job operations ------------------------------------------------------------------

    def probe(self, hosts: Sequence[Host], job: JobConfig, dataset_bytes: int
              ) -> list[HostFacts]:  # fmt: skip
        """Every host's facts for ``job`` (node 0 first); VeriError when one cannot answer."""

    def submit(self, job_id: str, hosts: Sequence[Host], dirs: Sequence[str]) -> JobRef:
        """Start the job whose folders ``dirs`` (node k's on ``hosts[k]``) are prepared, at
        launch or for a resume's next attempt; its handle. `SubmitError` (ref.py), carrying
        the nodes that did start, when one cannot be."""

    def state(self, job: JobTarget) -> JobRecord:
        """The job's record now (several nodes gathered); writes nothing, anywhere.
        NotFoundError when its folder is gone."""

    def node_state(self, job: JobTarget, node: Node) -> JobRecord:
        """One node's record now, judged as `state` judges it; writes nothing."""

    def cancel(self, job: JobTarget, grace: float) -> None:
        """End every rank on every node (SIGTERM, SIGKILL after ``grace``), `cancelled`
        recorded, the job's watcher (its retries) stopped first; VeriError naming the nodes
        it could not reach."""

    def logs(self, job: JobTarget, offset: int) -> bytes:
        """Rank 0's log from byte ``offset`` to its current end (b"" before it exists)."""

    def follow(self, job: JobTarget, offset: int, **options: object) -> Iterator[LogLine]:
        """Complete rank-0 log lines from ``offset`` until the job has settled (VeriError at
        once for a job that cannot be read)."""


_BACKENDS: dict[str, Backend] = {}


def _load() -> dict[str, Backend]:
    """The registered backends, by name (`direct` last: it takes every other destination)."""
    if not _BACKENDS:
        from veri_tui.launch.backends.direct import DirectBackend
        from veri_tui.launch.backends.slurm import SlurmBackend

        found: list[Backend] = [SlurmBackend(), DirectBackend()]
        for backend in found:
            _BACKENDS[backend.name] = backend
    return _BACKENDS


def backends() -> list[Backend]:
    """Every backend, in the order the CLI shows their options (`direct` first)."""
    return sorted(_load().values(), key=lambda b: b.group is not None)


def named(name: str) -> Backend:
    """The backend registered as ``name``; VeriError for an unknown one."""
    found = _load().get(name)
    if found is None:
        raise VeriError(f"{name!r}: no such backend; known: {', '.join(_load())}", key="backend")
    return found


def backend_of(kind: str) -> Backend:
    """The backend whose hosts (or registry entries) are of ``kind``."""
    for backend in _load().values():
        if kind in backend.kinds:
            return backend
    raise VeriError(f"{kind!r}: no backend runs hosts of this kind", key="backend")


def backend_for(where: object) -> Backend:
    """The backend of a destination the facade was given (`direct` for anything no other
    backend owns: None, a host, a list of hosts)."""
    return next(b for b in _load().values() if b.owns(where))


def options_of(name: str) -> tuple[Option, ...]:
    """The options backend ``name`` declares (the app builds its fields from them)."""
    return named(name).options


def add_cli_options(parser: argparse.ArgumentParser, grouped: bool) -> None:
    """Backends' options as flags: ``grouped`` False, those of `direct` (no group) among the
    command's own; True, each other backend's in its own group (its title says where else
    the keys may be given)."""
    for backend in backends():
        if (backend.group is not None) != grouped:
            continue
        group = parser if backend.group is None else parser.add_argument_group(backend.group)
        for opt in backend.options:
            if opt.many:
                group.add_argument(opt.cli_flag, dest=opt.name, help=opt.help,
                                   metavar=opt.metavar, action="append")  # fmt: skip
            else:
                group.add_argument(opt.cli_flag, dest=opt.name, help=opt.help,
                                   metavar=opt.metavar,
                                   type=int if opt.type is int else str)  # fmt: skip


def where_from(
    values: Mapping[str, object],
    tables: Mapping[str, Mapping[str, object]],
    job: JobConfig | None,
) -> object:
    """Where a job goes from the options given (by option name) and veri.toml's backend
    ``tables`` (by backend name): the one backend's destination, None for this machine.
    VeriError for a bad value, or for two backends given at once."""
    chosen: list[tuple[Backend, object]] = []
    for backend in backends():
        given = {o.name: values.get(o.name) for o in backend.options}
        where = backend.where_from(given, tables.get(backend.name), job)
        if where is not None:
            chosen.append((backend, where))
    if len(chosen) > 1:
        both = " and ".join(b.given_as for b, _ in reversed(chosen))
        raise VeriError(f"{both} are two targets; keep one", key=chosen[-1][0].name)
    return chosen[0][1] if chosen else None


def host_names(where: object, job: JobConfig | None = None) -> list[HostName]:
    """The host names a destination opens (`open_hosts`), node 0 first."""
    return backend_for(where).host_names(where, job)


def open_hosts(names: Sequence[HostName], trust: str | None = None) -> list[Host]:
    """The hosts of ``names`` (from `host_names`), opened by their backend."""
    where = names[0] if len(names) == 1 else list(names)
    return backend_for(where).open_hosts(names, trust)
