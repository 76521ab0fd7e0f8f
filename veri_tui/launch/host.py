"""The Host interface: the job policy a backend runs on one machine, which it *has*
(`machine`: machine.py's `Machine`, the commands, files and processes of that machine).

A job runs on N hosts, one node each (N = 1 for a local or a one-host SSH job); the launch
sequence (launching.py) and the preflight (preflight.py) are written against this interface
only, and the backend registry (backends/) opens the hosts. Three implementations:

- `LocalHost` (local_host.py): this machine (`LocalMachine`, local_machine.py);
- `SshHost` (ssh/host.py): a machine reached with paramiko (`SshMachine`, ssh/machine.py);
- `SlurmHost` (slurm/host.py): a Slurm login node, from which the `slurm` backend submits
  batch jobs (slurm/batch.py); its machine is its login node's, and the job folder's paths
  are the login node's host's (a `LocalHost` or an `SshHost`).

A host does the steps where running a job here or there differs: what it reports before a
launch (`probe`, `plan`), where a job's files are (`output_for`, `job_paths`, `stage`), the
packages a job's commands import (`pythonpath`) and the rows a preflight shows. What a host
reports before a launch is its `HostFacts`. Starting, judging, following and stopping a
job's supervisor are its backend's operations (backends/: `submit`, `state`, `follow`,
`cancel`), which run them on these hosts' machines. docs/architecture.md draws it, with
where a new backend plugs in.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch import memcheck
from veri_tui.launch.diskcheck import refusals, row
from veri_tui.launch.machine import Machine

if TYPE_CHECKING:
    from veri_tui.launch.job_datasets import JobData
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate
    from veri_tui.plan.model_info import ModelInfo

#: A preflight row: (check, ok, detail); the one row type every preflight returns. A passed
#: row whose detail starts `warning: ` runs, but not as planned (device.py).
Row = tuple[str, bool, str]


def row_text(row: Row) -> str:
    """`ok   plan: ...`, `WARN device: ...` or `FAIL model: ...`: a row as the app shows it."""
    check, ok, detail = row
    if ok and detail.startswith("warning: "):
        return f"WARN {check}: {detail.removeprefix('warning: ')}"
    return f"{'ok  ' if ok else 'FAIL'} {check}: {detail}"


@dataclass
class HostFacts:
    """What a host reported, plus every problem found (empty when it can run the job)."""

    host: str
    python: str
    facts: dict[str, Any]
    home: str
    veri_home: str
    gpus: list[dict[str, Any]] = field(default_factory=list)
    model_path: str | None = None
    model_info: ModelInfo | None = None
    model_bytes: int = 0
    problems: list[Refusal] = field(default_factory=list)
    #: Whether the model's counts are known (read on the host, or read here when planned).
    model_known: bool = True
    #: Whether the facts are worth showing (an SSH host's are; this machine's are known).
    shown: bool = True
    #: Lines shown whether or not `shown` (a Slurm partition's facts).
    notes: list[str] = field(default_factory=list)
    #: Keys the host adds to the job's spec (a Slurm job's layout and options).
    spec: dict[str, Any] = field(default_factory=dict)
    #: A host that stands for nodes it cannot name before the job runs (a Slurm partition):
    #: the cache key of their probe (probe/report.py) and their count.
    probed_as: tuple[str, int] | None = None
    #: The CUDA GPUs a node of the job gets when they are not the host's own `gpus` (a Slurm
    #: partition's per node; 0: CPU ranks), and where its ranks run (device.py's row).
    node_gpus: int | None = None
    ranks_on: str | None = None

    @property
    def gpu_name(self) -> str | None:
        """The plan's GPU for the detected hardware: `custom-<GB>GB` with its real memory.

        Three decimals keep the memory to the megabyte; the smallest board bounds the plan.
        """
        if not self.gpus:
            return None
        smallest = min(g["memory_bytes"] for g in self.gpus)
        return f"custom-{smallest / 1e9:.3f}GB"

    @property
    def jobs_dir(self) -> str:
        """Where the host keeps job folders."""
        return posixpath.join(self.veri_home, "jobs")

    def summary(self) -> list[str]:
        """Human lines for the log and the app: what was found on the host."""
        if not self.shown:
            return list(self.notes)
        gpus = ", ".join(f"{g['name']} ({g['memory_bytes'] / 1e9:.1f} GB)" for g in self.gpus)
        lines = [
            f"host {self.host}: python {self.facts.get('python')} ({self.python}), "
            f"torch {self.facts.get('torch') or 'missing'}",
            f"gpus: {len(self.gpus)} CUDA" + (f": {gpus}" if gpus else " (CPU processes, gloo)"),
            f"disk: {self.facts.get('disk_free_bytes', 0) / 1e9:.1f} GB free "
            f"at {self.facts.get('disk_path')}",
        ]
        if self.model_info is not None:
            lines.append(f"model: {self.model_path}: {self.model_info.parameter_count:,} params")
        return lines + self.notes

    def check(self) -> None:
        """Raise VeriError with every problem, one line each."""
        if self.problems:
            raise VeriError(self.problems)


class Host(Protocol):
    """A machine that holds job folders and runs their supervisors: the job policy of a
    backend (backends/) on it."""

    @property
    def machine(self) -> Machine:
        """The machine: its commands, files and processes."""

    @property
    def where(self) -> str:
        """The host in messages (`this machine`, the SSH host, `the Slurm cluster of ...`)."""

    @property
    def kind(self) -> str:
        """`local`, `ssh` or `slurm`: what the registry keeps to open the host again."""

    @property
    def label(self) -> str | None:
        """What job.json's `host` says for a job here: None for this machine, else `name`."""

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts: ...

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]: ...

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig: ...

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]: ...  # fmt: skip

    def stage(self, job: JobConfig, tmp: str) -> None: ...

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]: ...  # fmt: skip

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]: ...  # fmt: skip

    def tail_rows(self) -> list[Row]: ...

    def pythonpath(self, job_dir: str) -> list[str]: ...

    def trainer_path(self, facts: HostFacts) -> str:
        """Where the trainer package is on the host, for the fleet probe's ranks (uploaded
        there first where it is not installed)."""


def jobfolder_argv(host: Host, job_dir: str, *args: str) -> list[str]:
    """`python -m veri_tui.jobfolder ARGS` as ``host`` runs it for the job in ``job_dir``."""
    return [*host.pythonpath(job_dir), host.machine.python, "-m", "veri_tui.jobfolder", *args]


def supervisor_argv(host: Host, job_dir: str) -> list[str]:
    """The supervisor of the job in ``job_dir`` as ``host`` starts it."""
    job = f"{job_dir}/job.json"
    return [
        *host.pythonpath(job_dir),
        host.machine.python,
        "-m",
        "veri_tui.jobfolder.supervise",
        "--job",
        job,
    ]


def run_cancel(host: Host, job_dir: str, pid: int | None, grace: float) -> None:
    """`python -m veri_tui.jobfolder cancel` on ``host`` (veri_tui/jobfolder/__main__.py: the
    supervisor ends every rank, or the host ends them itself when it is gone); VeriError when it
    fails."""
    argv = jobfolder_argv(host, job_dir, "cancel", f"{job_dir}/job.json", "--grace", str(grace))
    argv += ["--pid", str(pid)] if pid else []
    res = host.machine.run(argv, timeout=grace + 60)
    if res.exit_status != 0:
        raise VeriError(f"cancel on {host.where} failed: {res.error_line()}", key="job")


# -- the plan against a host: its memory and disk ------------------------------------------


def check_memory(facts: HostFacts, plan: PlanRecord) -> Row:
    """Refuse (VeriError, `host_memory`) a plan whose host memory per node exceeds the host's
    MemAvailable, as its probe read it (veri_tui.launch.memcheck); else its row."""
    return memcheck.check(plan, facts.facts.get("mem_available_bytes"), facts.host)


def check_disk(host: Host, facts: HostFacts, disk: DiskEstimate, output: str | None) -> Row:
    """Refuse (VeriError) a job whose host cannot hold what it writes (the plan's `disk`,
    veri_tui.launch.diskcheck) in its jobs folder and output dir; else its row."""
    job, out = host.machine.places([facts.jobs_dir, output or facts.jobs_dir])
    problems = refusals(disk, job, out)
    if problems:
        raise VeriError(problems)
    return row(disk, job, out)


def tracker_problems(job: JobConfig) -> list[Refusal]:
    """The job's `report_to` trackers this interpreter cannot import (found without
    importing them), each one refusal: the job would fail at its start."""
    from veri_tui.jobfolder.knobs.trackers import missing, missing_message

    found = missing(job.hyperparameters.report_to)
    return [Refusal("report_to", missing_message(name, "here")) for name in found]


def capacity_rows(
    host: Host, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate, output: str | None,
    label: str,
    disk_first: bool = False,
) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
    """The host-memory and disk rows of one node (named `label <check>` when ``label``),
    and their refusals (`label: <message>`)."""
    checks: list[Callable[[], Row]] = [
        lambda: check_memory(facts, plan),
        lambda: check_disk(host, facts, disk, output),
    ]
    rows: list[Row] = []
    refused: list[Refusal] = []
    for run in reversed(checks) if disk_first else checks:
        try:
            key, ok, detail = run()
            rows.append((f"{label} {key}" if label else key, ok, detail))
        except VeriError as exc:
            refused += [Refusal(e.key, f"{label}: {e.message}" if label else e.message)
                        for e in exc.errors]  # fmt: skip
    return rows, refused
