"""A Slurm login node as a `Host` (veri_tui/launch/host.py): a job's supervisor is a batch job.

`SlurmHost` has the login node's own host (`login`: `LocalHost` for `--slurm local`,
`SshHost` for an alias or user@host[:port]) and its machine: the job folder sits on the
filesystem the login node and the compute nodes share, so its paths, staging and preflight
rows are the login node's host's. The `slurm` backend (veri_tui/launch/backends/slurm.py)
opens it. What differs:

- `probe`: the partition's facts (partition.py) decide the layout (nodes x ranks per node)
  and GPU; job folders go under `<veri home>/slurm/jobs` (a Slurm job is listed by its
  registry entry, not by folder as this machine's own jobs are);
- `batch_script`: the job's sbatch.sh, which `launch --dry-run` prints and batch.py submits
  (the batch job's submit, state and cancel: the `slurm` backend's operations).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import veri_tui.jobfolder
from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.launch.host import Host, HostFacts, Row, supervisor_argv, tracker_problems
from veri_tui.launch.machine import Machine, Result
from veri_tui.launch.slurm.options import SlurmOptions
from veri_tui.launch.slurm.partition import (
    Partition,
    layout,
    on_partition,
    probe_key,
    read_partition,
)
from veri_tui.launch.slurm.script import batch_script

if TYPE_CHECKING:
    from veri_tui.launch.job_datasets import JobData
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate

#: The folder holding the veri_tui package (its jobfolder and trainer) (`--slurm local`: the batch
#: job imports them from here, whatever PYTHONPATH sbatch's environment carries).
SOURCE_ROOT = str(Path(veri_tui.jobfolder.__file__).resolve().parents[2])


class SlurmHost:
    """A login node, submitting batch jobs. ``options`` None: a host reopened for a job
    already submitted (reading, cancelling or resuming it needs none)."""

    kind = "slurm"

    def __init__(self, login: Host, options: SlurmOptions | None = None) -> None:
        self.login = login
        self.options = options
        self.label: str | None = f"slurm:{login.machine.name}"
        self.where = f"the Slurm cluster of {login.where}"
        self.partition: Partition | None = None
        self._job_update: dict[str, Any] = {}

    @property
    def machine(self) -> Machine:
        """The login node's machine (the registry keeps its name: `local`, or the SSH host)."""
        return self.login.machine

    def slurm(self, argv: Sequence[str]) -> Result:
        """A Slurm client command on the login node; VeriError when it is not installed."""
        try:
            return self.machine.run(list(argv), timeout=60)
        except FileNotFoundError:  # this machine (over SSH the shell says so: exit 127)
            raise VeriError(
                f"{argv[0]} is not installed on {self.login.where}; run on "
                "the cluster's login node or pass --slurm LOGIN",
                key="slurm",
            ) from None

    def pythonpath(self, job_dir: str) -> list[str]:
        """This machine's source folder (`local`), else the job's uploaded packages."""
        if self.machine.local:
            return ["env", f"PYTHONPATH={SOURCE_ROOT}"]
        return self.login.pythonpath(job_dir)

    # -- before the launch ----------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """The login node's facts (Python, torch, the model, free space) and the partition's:
        the job's layout, its GPU, a node's memory. A partition the controller does not have
        raises VeriError `partition` here, before anything is uploaded or submitted."""
        if self.options is None:
            raise VeriError("this Slurm host was opened without options", key="slurm")
        self.partition = part = read_partition(self.slurm, self.options.partition, self.where)
        facts = self._login_facts(job, dataset_bytes)
        per_node, gpu, problems = layout(job, part, self.options)
        nodes = self.options.nodes
        facts.problems += problems
        facts.gpus = []  # the login node's GPUs (if any) are not the job's
        facts.node_gpus = per_node if part.gpus_per_node else 0
        facts.ranks_on = f"partition {part.name}"
        facts.veri_home = posixpath.join(facts.veri_home, "slurm")
        facts.facts["mem_available_bytes"] = part.memory_bytes or None
        chosen = {
            **self.options.to_dict(),
            "partition": part.name,
            "gpus_per_node": per_node if part.gpus_per_node else 0,
        }
        facts.spec = {"slurm": chosen, "nnodes": nodes, "nproc_per_node": per_node}
        facts.probed_as = (probe_key(part.name), nodes)  # the partition's cached probe
        facts.notes.append(f"slurm: {part.summary()}")
        ranks = f"{per_node} x {gpu}" if part.gpus_per_node else f"{per_node} CPU ranks (gloo)"
        facts.notes.append(f"slurm: {nodes} node(s) x {ranks}")
        self._job_update = {"gpu_count": nodes * per_node, **({"gpu": gpu} if gpu else {})}
        if nodes > 1:  # the allocation's nodes: the plan's network term, its probe's figure
            self._job_update["node_count"] = nodes
        return facts

    def _login_facts(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """The login node's facts; an SSH login node's are its host's probe for no GPU."""
        if not self.machine.local:
            return self.login.probe(job.copy_with(update={"gpu_count": 0}), dataset_bytes)
        from veri_tui.jobfolder.contract.layout import veri_home

        home, python = str(Path.home()), self.machine.python
        found = HostFacts(self.where, python, {}, home, str(veri_home()), shown=False)
        found.problems += tracker_problems(job)  # the compute nodes share this install
        return found

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]:
        """The login node's plan of the job laid out on the partition (``given`` is not used:
        it was made for another layout)."""
        if self.machine.local:
            from veri_tui.launch.job_datasets import with_data

            # Planned with the dataset it trains on, so the predicted price counts its tokens.
            for key in ("dataset", "eval_dataset"):
                self._job_update.setdefault(key, getattr(with_data(job), key))
        laid_out, rec = self.login.plan(job.copy_with(update=self._job_update), facts)
        return laid_out, on_partition(rec, self.partition)

    # -- the job folder on the shared filesystem: as a direct job's on the login node -----

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig:
        return self.login.output_for(job, facts)

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]:  # fmt: skip
        return self.login.job_paths(job, plan, job_dir, facts)

    def stage(self, job: JobConfig, tmp: str) -> None:
        self.login.stage(job, tmp)

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]:  # fmt: skip
        return self.login.path_rows(job, paths, label)

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
        return self.login.capacity(facts, plan, disk, output, label)

    def tail_rows(self) -> list[Row]:
        return self.login.tail_rows()

    def trainer_path(self, facts: HostFacts) -> str:
        return self.login.trainer_path(facts)

    # -- the batch job ----------------------------------------------------------------------

    def batch_script(self, job_dir: str, record: JobRecord) -> str:
        """The job's sbatch.sh (script.py): its spec, the supervisor as this node starts it."""
        spec = cast(dict[str, Any], record["spec"])
        return batch_script(record["job_id"], job_dir, spec, supervisor_argv(self, job_dir))


def open_slurm(options: SlurmOptions, trust: str | None = None) -> SlurmHost:
    """The login node of ``options`` (connected now when it is an SSH host)."""
    return SlurmHost(login_host(options.login, trust=trust, connect=True), options)


def login_host(
    login: str, *, trust: str | None = None, python: str | None = None, connect: bool = False
) -> Host:
    """`local`: this machine; else the SSH host (connected on first use unless ``connect``)."""
    if login == "local":
        from veri_tui.launch.local_host import LocalHost

        return LocalHost()
    from veri_tui.launch.ssh.host import SshHost

    if connect:
        return SshHost.open(login, trust=trust)
    return SshHost(login, trust=trust, python=python)
