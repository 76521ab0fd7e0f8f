"""What a backend is: the `Backend` protocol a backend's package implements, the `Option`s it
declares, and a `Destination` (a backend with a value of its own destination type).

A backend (veri_tui/plugins.py says where they are found; the registry, backends/__init__.py,
loads them) is generic over its destination `D`: what `where_from` reads from its options and
veri.toml's `[<name>]` table (`direct`: the hosts; `slurm`: `SlurmOptions`), what `accepts`
recognises in a value the facade was given, and what `host_names` and `open_hosts` take.
Its handle is an opaque string (ref.py). It owns the job's operations: `probe` its hosts,
`submit` the prepared folders, and on the open job (target.py's `JobTarget`, plain data)
`state`, `node_state`, `cancel`, `logs`, `follow`, `prepare` and `resume`, and what of its
scheduler's outcome a reader keeps (`keep_outcome`). supervised.py's `SupervisedBackend`
gives all of them to a backend whose job is one supervisor per node, from four steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from veri_tui.jobfolder.contract.record import JobRecord, JobSpec, ResumeChoice
    from veri_tui.launch.backends.ref import JobRef
    from veri_tui.launch.host import Host, HostFacts
    from veri_tui.launch.loglines import LogLine
    from veri_tui.launch.probe.fleet import ProbeChoice
    from veri_tui.launch.probe.report import ProbeReport
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig

D = TypeVar("D")


@dataclass(frozen=True)
class Option:
    """One option a backend takes: ``name`` is its key (veri.toml's `[<backend>]` table, the
    argparse dest), ``type`` str or int, ``help`` the flag's help. ``flag``: the CLI flag
    when not `--<name with dashes>`; ``many``: repeatable (a list); ``label``/``hint``: the
    app's field label and placeholder (None: not an app field); ``target``: the launch
    screen's target fills it (`local` for this machine; a ``many`` one takes the target
    first, then its field's hosts)."""

    name: str
    type: type
    help: str
    default: object = None
    metavar: str | None = None
    flag: str | None = None
    many: bool = False
    label: str | None = None
    hint: str | None = None
    target: bool = False

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


class Backend(Protocol[D]):
    """How jobs run: what the registry knows of one backend."""

    #: Its registry name (`direct`, `slurm`).
    name: str
    #: The host kinds (`Host.kind`, a registry entry's `kind`) that are this backend's.
    kinds: tuple[str, ...]
    #: The CLI's option group title (None: the command's own options).
    group: str | None
    #: Its options, in the order shown.
    options: tuple[Option, ...]
    #: Its options of `veri-tui probe`, which name the nodes it probes (none: its nodes are
    #: probed only within a launch).
    probe_options: tuple[Option, ...]
    #: Whether a launch on one of its hosts with 2 GPUs or more probes that host first
    #: (probe/fleet.py; a Slurm partition's nodes are unknown before the allocation).
    probes_one_host: bool
    #: How the CLI names its destination in a message (`--slurm`).
    given_as: str
    #: What it does, as the app's scheduler choice says it (`torchrun on the target`).
    summary: str
    #: Whether its scheduler allocates the nodes: the job is planned for what it gives (the
    #: app drops the editor's gpu and gpu_count, and asks for a GPU type instead).
    allocates: bool

    def where_from(
        self,
        values: Mapping[str, object],
        table: Mapping[str, object] | None,
        job: JobConfig | None,
    ) -> D | None:
        """Its destination from the options given (None: not given) and veri.toml's
        `[<name>]` ``table`` and job keys; None when the job is not for this backend.
        VeriError for a bad value."""

    def accepts(self, where: object, job: JobConfig | None) -> D | None:
        """``where`` (a destination the facade was given: what `where_from` returned, or
        None for this machine, a host, several) as this backend's, with the job's own
        (veri.toml's `hosts`); None when it is another backend's."""

    def host_names(self, where: D) -> list[str]:
        """The nodes' hosts ``where`` names, node 0 first (none: this machine)."""

    def open_hosts(self, where: D, trust: str | None) -> list[Host]:
        """The job's hosts, connected; VeriError (the first failure) when one cannot be."""

    def reopen(self, host: str, python: str) -> Host:
        """A registry entry's host ``host`` again (connected on first use)."""

    def label(self, host: str) -> str:
        """The host as job records name it."""

    def probe_nodes(self, values: Mapping[str, object], trust: str | None,
                    ranks_per_node: int | None, sizes: Sequence[int] | None
                    ) -> ProbeReport | None:  # fmt: skip
        """`veri-tui probe` of the nodes ``values`` (its probe options, by name) name: their
        report; None when the values name none of its. VeriError for a bad value, or when
        the probe fails."""

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

    def prepare(self, job: JobTarget, node: Node, spec: JobSpec | None,
                choice: ResumeChoice | None = None) -> JobRecord:  # fmt: skip
        """The node's job made `pending` for its next attempt (``spec`` replaces its spec;
        ``choice``: a multi-node resume's step), starting nothing; VeriError with the
        refusal its host gave."""

    def resume(self, job: JobTarget, spec: JobSpec | None) -> tuple[JobRecord, JobRef]:
        """A new attempt of the ended one-node job in its folder (prepared, then submitted):
        the record prepared, and the handle it runs under."""

    def keep_outcome(self, job: JobTarget, record: JobRecord) -> None:
        """Keep in job.json the outcome its scheduler reported that ``record`` (a read of
        the job) shows and job.json lacks; nothing when there is none (settle.py)."""

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


@dataclass(frozen=True)
class Destination(Generic[D]):
    """Where a job goes: its backend, and the destination in that backend's own type."""

    backend: Backend[D]
    where: D

    @property
    def names(self) -> list[str]:
        """The nodes' hosts, node 0 first (none: this machine)."""
        return self.backend.host_names(self.where)

    def open(self, trust: str | None) -> list[Host]:
        """The job's hosts, connected."""
        return self.backend.open_hosts(self.where, trust)


#: A backend of any destination type, as the registry holds them.
AnyBackend = Backend[Any]
