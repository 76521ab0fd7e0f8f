"""The `slurm` backend: a job submitted with sbatch from a login node, its supervisor the
batch job (veri_tui/launch/slurm/, docs/slurm.md).

Its options are `[slurm]`'s keys (slurm/options.py checks them): `--slurm LOGIN` names the
login node (`local`: sbatch on this machine), the others where and how the job is
submitted; the app's Slurm fields are the same options. Its host is `SlurmHost`, which owns
the login node's Machine (`LocalHost` or `SshHost`) by composition; its handle is the Slurm
job id, so a registry entry (kind `slurm`) is kept also when the login node is this machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from veri_tui.errors import VeriError
from veri_tui.launch.backends.api import Option
from veri_tui.launch.backends.supervised import SupervisedBackend
from veri_tui.launch.loglines import follow_lines
from veri_tui.launch.slurm.options import SlurmOptions, keys, slurm_options

if TYPE_CHECKING:
    from veri_tui.jobfolder.contract.record import JobRecord, JobSpec
    from veri_tui.launch.host import Host
    from veri_tui.launch.loglines import LogLine
    from veri_tui.launch.probe.fleet import ProbeChoice
    from veri_tui.launch.probe.report import ProbeReport
    from veri_tui.launch.slurm.host import SlurmHost
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig


class SlurmBackend(SupervisedBackend):
    """sbatch from a login node; the controller's state judges the job. Its handle is the
    Slurm job id (slurm/batch.py)."""

    name: str = "slurm"
    kinds: tuple[str, ...] = ("slurm",)
    group: str | None = "Slurm (also veri.toml [slurm]; these win)"
    given_as: str = "--slurm"
    probes_one_host: bool = False
    summary: str = "sbatch from the target"
    allocates: bool = True
    #: `[slurm]`'s keys, each spelled once: a field of `SlurmOptions` (slurm/options.py).
    options: tuple[Option, ...] = tuple(
        Option(k.name, k.type, k.doc.help, k.default, k.doc.metavar, k.doc.flag,
               label=k.doc.label, hint=k.doc.hint, target=k.name == "login")
        for k in keys()
    )  # fmt: skip

    #: `veri-tui probe --slurm`: this allocation's nodes (probe/allocation.py), or those srun
    #: allocates for the probe alone.
    probe_options: tuple[Option, ...] = (
        Option("slurm", bool, "the nodes of this Slurm allocation ($SLURM_JOB_ID), else of one "
               "srun allocates"),
        Option("partition", str, "with --slurm outside an allocation", metavar="P"),
        Option("nodes", int, "with --slurm: nodes (default: all)", metavar="N"),
    )  # fmt: skip

    def where_from(
        self,
        values: Mapping[str, object],
        table: Mapping[str, object] | None,
        job: JobConfig | None,
    ) -> SlurmOptions | None:
        return slurm_options(table, values)

    def accepts(self, where: object, job: JobConfig | None) -> SlurmOptions | None:
        return where if isinstance(where, SlurmOptions) else None

    def probe_nodes(self, values: Mapping[str, object], trust: str | None,
                    ranks_per_node: int | None, sizes: Sequence[int] | None
                    ) -> ProbeReport | None:  # fmt: skip
        partition, nodes = values.get("partition"), values.get("nodes")
        if not values.get("slurm"):
            if partition or nodes:
                raise VeriError("--partition and --nodes go with --slurm (SSH hosts: one "
                                "--host per node)", key="slurm")  # fmt: skip
            return None
        from veri_tui.launch.probe.allocation import probe_allocation

        return probe_allocation(cast("str | None", partition), cast("int | None", nodes),
                                ranks_per_node, sizes)  # fmt: skip

    def host_names(self, where: SlurmOptions) -> list[str]:
        return [where.login]  # one host, its login node: the allocation's nodes are Slurm's

    def open_hosts(self, where: SlurmOptions, trust: str | None) -> list[Host]:
        from veri_tui.launch.slurm.host import open_slurm

        return [open_slurm(where, trust)]

    def reopen(self, host: str, python: str) -> Host:
        from veri_tui.launch.slurm.host import SlurmHost, login_host

        return SlurmHost(login_host(host, python=python))

    def label(self, host: str) -> str:
        return f"slurm:{host}"

    def check_dry_run(self) -> None:
        return None  # the batch script is what a dry run prints

    def script(self, host: Host, job_dir: str, record: JobRecord) -> str:
        from veri_tui.launch.slurm.host import SlurmHost

        return cast(SlurmHost, host).batch_script(job_dir, record)

    def record_probe_mode(self, spec: JobSpec, choice: ProbeChoice) -> None:
        """spec["slurm"]["probe"]: "off" (--no-probe, VERI_PROBE=0), "allow"
        (--allow-slow-nodes: recorded, the job goes on) or "stop" (a slow or sick node ends
        it); the batch job probes its allocation (slurm/script.py)."""
        off = not choice.run or os.environ.get("VERI_PROBE") == "0"
        slurm = cast("dict[str, dict[str, object]]", spec)["slurm"]
        slurm["probe"] = "off" if off else "allow" if choice.allow_slow else "stop"

    def refuse_nodes(self, nodes: int | None) -> None:
        return None  # any node count: the global checkpoint in the shared folder is resharded

    def relayout(self, host: Host, record: JobRecord, gpu_count: int | None, nodes: int | None
                 ) -> tuple[int | None, bool]:  # fmt: skip
        """The options the job was launched with (its spec["slurm"]), on ``nodes`` nodes
        when given; a new rank count spread over them."""
        from veri_tui.launch.slurm.host import SlurmHost
        from veri_tui.launch.slurm.options import options_for_resume, resume_count

        gpu_count = resume_count(record, gpu_count, nodes)
        cast(SlurmHost, host).options = options_for_resume(record, gpu_count, nodes)
        relaid = nodes is not None and nodes != int(record["spec"].get("nnodes") or 1)
        return gpu_count, relaid

    # -- the job operations' steps (supervised.py): the batch job, slurm/batch.py -----------

    def start(self, host: Host, job_dir: str) -> str:
        from veri_tui.launch.slurm import batch

        return batch.submit(cast("SlurmHost", host), job_dir)

    def judge(self, job: JobTarget, node: Node, record: JobRecord,
              reread: Callable[[], JobRecord]) -> JobRecord:  # fmt: skip
        from veri_tui.launch.slurm import batch

        return batch.judge(cast("SlurmHost", node.host), record, node.handle, reread)

    def stop(self, job: JobTarget, node: Node, grace: float) -> None:
        from veri_tui.launch.slurm import batch

        batch.cancel(cast("SlurmHost", node.host), node.job_dir, node.handle, grace)

    def tail(self, job: JobTarget, node: Node, path: str, offset: int,
             done: Callable[[], bool], **options: object) -> Iterator[LogLine]:  # fmt: skip
        """The log read by offset until ``done()`` (the supervisor's pid is a compute
        node's: nothing here can tail it)."""

        def read(off: int) -> bytes:
            try:
                return node.host.machine.read_bytes(path, 1 << 30, off)
            except FileNotFoundError:
                return b""

        poll = options.get("poll_s", 1.0)
        seconds = float(poll) if isinstance(poll, int | float) else 1.0
        return follow_lines(read, done, offset, seconds)


BACKEND = SlurmBackend()
