"""This machine as a `Host` (veri_tui/launch/host.py): job folders under $VERI_HOME/jobs.

Its Machine is `LocalMachine` (local_machine.py: subprocess, files in place, processes in
their own sessions). A local job uses its model and dataset where they are: its folder holds
only what the job writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.layout import veri_home
from veri_tui.launch.device import local_cuda
from veri_tui.launch.host import HostFacts, Row, capacity_rows, tracker_problems
from veri_tui.launch.job_datasets import JobData
from veri_tui.launch.local_machine import LocalMachine
from veri_tui.launch.memcheck import local_available
from veri_tui.launch.spec import local_paths
from veri_tui.plan.gpus import gpus_text

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate

QLORA_NEEDS_CUDA = (
    "QLoRA needs a CUDA GPU (bitsandbytes NF4) and this machine has none (no nvidia-smi); "
    "launch on a GPU host with --host, or drop load_in_4bit"
)


def device_problem(gpu_count: int, load_in_4bit: bool = False) -> Refusal | None:
    """More GPUs asked for than `nvidia-smi -L` lists here. Without NVIDIA GPUs the trainer
    runs ``gpu_count`` CPU processes (gloo), so any count is allowed there; but not QLoRA,
    which needs CUDA (the trainer refuses it too, before anything starts)."""
    if shutil.which("nvidia-smi") is None:
        return Refusal("load_in_4bit", QLORA_NEEDS_CUDA) if load_in_4bit else None
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None  # a broken driver shows up as the trainer's own failure, with its message
    have = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if 0 < have < gpu_count:
        return Refusal(
            "gpu_count",
            f"asks for {gpus_text(gpu_count)} but this machine has {have} (nvidia-smi -L); "
            "lower --gpu-count or launch on a bigger machine with --host",
        )
    return None


def local_code() -> str:
    """The folder holding this installation's `veri_tui` package (its trainer on PYTHONPATH
    there)."""
    import importlib.util

    spec = importlib.util.find_spec("veri_tui.trainer")
    if spec is None or not spec.submodule_search_locations:
        raise VeriError("the bundled trainer package is not installed here", key="trainer")
    return str(Path(next(iter(spec.submodule_search_locations))).parents[1])


class LocalHost:
    """This machine. ``home`` defaults to $VERI_HOME (~/.veri)."""

    kind = "local"
    label: str | None = None
    where = "this machine"

    def __init__(self, home: Path | None = None) -> None:
        self.machine = LocalMachine()
        self.home = Path(home) if home is not None else veri_home()

    # -- the job's steps ---------------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """What this machine offers the job: its GPUs checked against gpu_count (and, beside
        NVIDIA devices, torch's CUDA view of them: device.py), its free memory; the model is
        read here when the job is planned."""
        facts: dict[str, Any] = {"mem_available_bytes": local_available()}
        home = str(Path.home())
        python = self.machine.python
        found = HostFacts(self.where, python, facts, home, str(self.home), shown=False)
        problem = device_problem(int(job.gpu_count), bool(job.hyperparameters.load_in_4bit))
        found.problems += [problem] if problem is not None else []
        found.gpus, unusable = local_cuda()  # torch's view, asked only beside NVIDIA devices
        found.problems += [unusable] if unusable is not None else []
        found.problems += tracker_problems(job)
        return found

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]:
        """The plan made here (the caller's when it made one): the model read on this
        machine, calibrated by this machine's runs."""
        from veri_tui.plan import plan_job

        return job, given if given is not None else plan_job(job)

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig:
        return job  # a path here: checked with the job's other paths (job_paths)

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]:  # fmt: skip
        return local_paths(job, plan, Path(job_dir))

    def stage(self, job: JobConfig, tmp: str) -> None:
        """Nothing to copy: a local job reads its model and dataset where they are."""

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]:  # fmt: skip
        """The model, dataset and output the job would use (after a dry run of its paths)."""
        if paths is None:
            return []
        model, dataset, output, _ = paths
        shown = output if job.output else "<job folder>/output"
        return [("model", True, model), ("dataset", True, str(dataset)), ("output", True, shown)]

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
        """Disk, then host memory, against this machine."""
        out = output or os.path.join(facts.veri_home, "jobs")
        return capacity_rows(self, facts, plan, disk, out, label, disk_first=True)

    def tail_rows(self) -> list[Row]:
        """Whether torch is installed (found without importing it: the app stays torch-free;
        the supervisor runs `python -m torch.distributed.run` with this interpreter)."""
        import importlib.util

        ok = importlib.util.find_spec("torch") is not None
        return [("torch", ok, "installed" if ok else "missing: pip install torch")]

    def pythonpath(self, job_dir: str) -> list[str]:
        return []  # the packages are installed with this interpreter

    def trainer_path(self, facts: HostFacts) -> str:
        return local_code()
