"""The `direct` backend: the job's supervisor started on its hosts themselves, one node each.

Its destination is the hosts, node 0 first (`Hosts`): none is this machine (`LocalHost`);
one SSH host is a one-host job, several one multi-node job (`SshHost`, paramiko imported
only when one is asked for). Its one option is `--host` (repeatable), veri.toml's `hosts`;
it keeps no `[direct]` table.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import SUPERVISOR_LOG
from veri_tui.launch.backends.api import Destination, Option
from veri_tui.launch.backends.supervised import SupervisedBackend, supervisor_pid

if TYPE_CHECKING:
    from veri_tui.jobfolder.contract.record import JobRecord, JobSpec
    from veri_tui.launch.host import Host
    from veri_tui.launch.loglines import LogLine
    from veri_tui.launch.probe.fleet import ProbeChoice
    from veri_tui.launch.probe.report import ProbeReport
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig

#: The direct backend's destination: the hosts, node 0 first; none is this machine.
Hosts = tuple[str, ...]
#: `veri-tui resume --nodes` of a job that is not a Slurm job.
NOT_SLURM_NODES = (
    "--nodes re-plans a Slurm job, whose nodes share its folder; this job's nodes are its "
    "hosts (a multi-node SSH job resumes on its own layout)"
)


class DirectBackend(SupervisedBackend):
    """Supervisors started on the job's hosts: this machine, or N SSH hosts. Its handle is
    the supervisor's pid, judged by the lost rule where the supervisor runs."""

    name: str = "direct"
    kinds: tuple[str, ...] = ("local", "ssh")
    group: str | None = None
    given_as: str = "--host (or veri.toml's hosts)"
    probes_one_host: bool = True
    summary: str = "torchrun on the target"
    options: tuple[Option, ...] = (
        Option(
            "host", str, metavar="SSH_HOST", many=True,
            help="~/.ssh/config alias or user@host[:port]; repeat for a multi-node job "
            "(node 0 first)", target=True, label="more hosts",
            hint="multi-node: other hosts, space-separated (enter)",
        ),
    )  # fmt: skip

    probe_options: tuple[Option, ...] = (
        Option("host", str, metavar="SSH_HOST", many=True,
               help="~/.ssh/config alias or user@host[:port]; repeat for several nodes (node 0 "
               "first); none: this machine"),
    )  # fmt: skip

    def where_from(
        self,
        values: Mapping[str, object],
        table: Mapping[str, object] | None,
        job: JobConfig | None,
    ) -> Hosts | None:
        if table is not None:
            raise VeriError("the hosts go on top of veri.toml (hosts = [...]), not in a "
                            "[direct] table", key="direct")  # fmt: skip
        given = cast("list[str] | None", values.get("host"))
        return tuple(given or (job.hosts if job is not None else None) or ()) or None

    def accepts(self, where: object, job: JobConfig | None) -> Hosts | None:
        """None (the job's own `hosts`, else this machine), a host, or several."""
        if isinstance(where, str):
            return (where,)
        if where is None or isinstance(where, list | tuple):
            named = [str(h) for h in where or ()]
            return tuple(named or (job.hosts if job is not None else None) or ())
        return None

    def probe_nodes(self, values: Mapping[str, object], trust: str | None,
                    ranks_per_node: int | None, sizes: Sequence[int] | None
                    ) -> ProbeReport:  # fmt: skip
        """The hosts named (none: this machine), opened and probed; it takes whatever no
        other backend does, as `accepts` does."""
        from veri_tui.launch.probe.fleet import probe_hosts

        names = [str(h) for h in cast("list[str] | None", values.get("host")) or ()]
        if len(set(names)) < len(names):
            raise VeriError("a host is named twice; one node per host", key="hosts")
        return probe_hosts(Destination(self, tuple(names)), trust,
                           ranks_per_node=ranks_per_node, sizes=sizes)  # fmt: skip

    def host_names(self, where: Hosts) -> list[str]:
        return list(where)

    def open_hosts(self, where: Hosts, trust: str | None) -> list[Host]:
        """This machine when none is named; else every SSH host connected in parallel (the
        ones already open are closed when one cannot be)."""
        if not where:
            from veri_tui.launch.local_host import LocalHost

            return [LocalHost()]
        from veri_tui.launch.hostpool import first_failure, in_parallel
        from veri_tui.launch.ssh.host import SshHost

        opened = in_parallel(lambda n: SshHost.open(n, trust=trust), list(where))
        hosts: list[Host] = [h for h in opened if not isinstance(h, Exception)]
        failed = [e for e in opened if isinstance(e, Exception)]
        if failed:
            for host in hosts:
                host.machine.close()
            raise first_failure(failed)
        return hosts

    def reopen(self, host: str, python: str) -> Host:
        from veri_tui.launch.ssh.host import SshHost

        return SshHost(host, python=python)

    def label(self, host: str) -> str:
        return host

    def check_dry_run(self) -> None:
        raise VeriError("prints a Slurm batch script: add --slurm LOGIN", key="dry_run")

    def script(self, host: Host, job_dir: str, record: JobRecord) -> str:
        self.check_dry_run()
        return ""

    def record_probe_mode(self, spec: JobSpec, choice: ProbeChoice) -> None:
        return None  # its hosts are probed before the launch (probe/fleet.py)

    def refuse_nodes(self, nodes: int | None) -> None:
        if nodes is not None:
            raise VeriError(NOT_SLURM_NODES, key="nodes")

    def relayout(self, host: Host, record: JobRecord, gpu_count: int | None, nodes: int | None
                 ) -> tuple[int | None, bool]:  # fmt: skip
        return gpu_count, False

    # -- the job operations' steps (supervised.py) -----------------------------------------
    # Their modules are imported in the steps: the registry loads this class in every
    # command's parser, `veri-tui plan` included, and the lost rule's imports (the failure
    # reading, the job lock) took 18 ms there, against a plan of 76 ms without them
    # (`python -X importtime`; benchmarks/bench_plan.py).

    def start(self, host: Host, job_dir: str) -> str:
        """The supervisor started detached on ``host``; its pid."""
        from veri_tui.launch.host import supervisor_argv

        log = posixpath.join(job_dir, SUPERVISOR_LOG)
        return str(host.machine.start_detached(supervisor_argv(host, job_dir), log, job_dir))

    def judge(self, job: JobTarget, node: Node, record: JobRecord,
              reread: Callable[[], JobRecord]) -> JobRecord:  # fmt: skip
        from veri_tui.jobfolder.contract.lost import judge as judge_pid

        where = node.host.label or ""
        return judge_pid(record, supervisor_pid(node), node.host.machine.alive, reread, where=where)

    def stop(self, job: JobTarget, node: Node, grace: float) -> None:
        from veri_tui.launch.host import run_cancel

        run_cancel(node.host, node.job_dir, supervisor_pid(node), grace)

    def tail(self, job: JobTarget, node: Node, path: str, offset: int,
             done: Callable[[], bool], **options: object) -> Iterator[LogLine]:  # fmt: skip
        return node.host.machine.follow(path, supervisor_pid(node), offset, done, **options)


BACKEND = DirectBackend()
