"""This machine as a `Host` (veri_tui/launch/host.py): job folders under $VERI_HOME/jobs.

Commands run with subprocess; files are read and written in place (whole files through
jobfolder's atomic writer). A supervisor is started in its own session (setsid), stdin from
/dev/null and output to a file, so it outlives the CLI or app that launched it and ignores
the SIGHUP of a closing terminal (torchrun dies on SIGHUP even under nohup: field notes);
this process polls the supervisors it started, so a long-lived launcher (the app) reaps them
instead of collecting zombies. A local job uses its model and dataset where they are: its
folder holds only what the job writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.atomic import write_bytes_atomic
from veri_tui.jobfolder.layout import veri_home
from veri_tui.jobfolder.procs import pid_alive
from veri_tui.launch.device import local_cuda
from veri_tui.launch.diskcheck import Place, local_place
from veri_tui.launch.host import (
    HostFacts,
    Row,
    capacity_rows,
    tracker_problems,
)
from veri_tui.launch.jobdata import JobData
from veri_tui.launch.machine import Result
from veri_tui.launch.memcheck import local_available
from veri_tui.launch.records import LogLine, follow_lines
from veri_tui.launch.spec import local_paths

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate

# Supervisors this process started: polled so that a long-lived launcher (the app) reaps them.
_children: list[subprocess.Popen[bytes]] = []


def reap() -> None:
    """Forget (and reap) the supervisors this process started that have exited."""
    _children[:] = [p for p in _children if p.poll() is None]


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
            f"asks for {gpu_count} GPUs but this machine has {have} (nvidia-smi -L); "
            "lower --gpu-count or launch on a bigger machine with --host",
        )
    return None


class _Lines:
    """A local command's stdout, line by line (a `Stream`)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True)

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class LocalHost:
    """This machine. ``home`` defaults to $VERI_HOME (~/.veri)."""

    kind = "local"
    name = "local"
    label: str | None = None
    where = "this machine"
    local = True
    address = "127.0.0.1"

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home) if home is not None else veri_home()
        self.python = sys.executable

    # -- commands and processes ------------------------------------------------------------

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bytes | None = None
            ) -> Result:  # fmt: skip
        done = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                              timeout=timeout, check=False)  # fmt: skip
        return Result(done.returncode, done.stdout, done.stderr)

    def stream(self, argv: Sequence[str]) -> _Lines:
        return _Lines(argv)

    def start_detached(self, argv: Sequence[str], log: str, cwd: str) -> int:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=cwd, start_new_session=True,
            )  # fmt: skip
        reap()
        _children.append(proc)
        return proc.pid

    def alive(self, pid: int) -> bool:
        reap()
        return pid_alive(pid)

    # -- files -----------------------------------------------------------------------------

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)  # at most what is there: `limit` may be far larger than the file
            return fh.read(max(0, min(limit, os.fstat(fh.fileno()).st_size - offset)))

    def write_atomic(self, path: str, data: bytes) -> None:
        write_bytes_atomic(path, data)

    def append(self, path: str, data: bytes) -> None:
        with open(path, "ab") as fh:
            fh.write(data)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def places(self, paths: Sequence[str]) -> list[Place]:
        return [local_place(p) for p in paths]

    # -- the job's steps ---------------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """What this machine offers the job: its GPUs checked against gpu_count (and, beside
        NVIDIA devices, torch's CUDA view of them: device.py), its free memory; the model is
        read here when the job is planned."""
        facts: dict[str, Any] = {"mem_available_bytes": local_available()}
        home = str(Path.home())
        found = HostFacts(self.where, self.python, facts, home, str(self.home), shown=False)
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

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: Any) -> Iterator[LogLine]:  # fmt: skip
        """Complete lines from ``offset`` until ``done()`` and the file is drained."""

        def read(off: int) -> bytes:
            try:
                return self.read_bytes(path, 1 << 40, off)
            except FileNotFoundError:
                return b""

        return follow_lines(read, done, offset, float(options.get("poll_s", 0.2)))

    def close(self) -> None:
        """Nothing held open."""


def local_refusal(problem: Refusal | None) -> None:
    """Raise a found refusal (VeriError)."""
    if problem is not None:
        raise VeriError(problem)
