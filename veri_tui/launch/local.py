"""The local target: detached jobs on this machine, one folder each under $VERI_HOME/jobs.

A job is started as ``python -m jobfolder.supervise --job <job_dir>/job.json`` in its own
session (setsid), stdin from /dev/null and output to a file, so it outlives the CLI or app
that launched it and ignores the SIGHUP of a closing terminal (torchrun dies on SIGHUP even
under nohup: field notes). All state is read back from the folder, never kept in memory.
`resume` starts a new attempt of an ended job in the same folder (jobfolder/attempts.py).
The SSH target mirrors these methods (docs/jobs.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from jobfolder.atomic import fsync_dir, write_json_atomic
from jobfolder.attempts import ResumeRefused, prepare_resume
from jobfolder.control import cancel_job
from jobfolder.layout import JOB_FILE, veri_home
from jobfolder.procs import GRACE_S
from jobfolder.record import JobRecord, JobSpec
from jobfolder.status import has_ended
from veri_tui.errors import VeriError
from veri_tui.launch.records import LogLine, follow_lines, read_record, wait_until_ended

# Supervisors this process started: polled so that a long-lived launcher (the app) reaps them
# instead of collecting zombies.
_children: list[subprocess.Popen[bytes]] = []


def _reap() -> None:
    _children[:] = [p for p in _children if p.poll() is None]


QLORA_NEEDS_CUDA = (
    "QLoRA needs a CUDA GPU (bitsandbytes NF4) and this machine has none (no nvidia-smi); "
    "launch on a GPU host with --host, or drop load_in_4bit"
)


def check_devices(gpu_count: int, load_in_4bit: bool = False) -> None:
    """Refuse more GPUs than this machine has. Without NVIDIA GPUs the trainer runs
    ``gpu_count`` CPU processes (gloo), so any count is allowed there; but not QLoRA,
    which needs CUDA (the trainer refuses it too, before anything starts)."""
    if shutil.which("nvidia-smi") is None:
        if load_in_4bit:
            raise VeriError(QLORA_NEEDS_CUDA, key="load_in_4bit")
        return
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=15, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return  # a broken driver shows up as the trainer's own failure, with its message
    have = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if 0 < have < gpu_count:
        raise VeriError(
            f"asks for {gpu_count} GPUs but this machine has {have} (nvidia-smi -L); "
            "lower --gpu-count or launch on a bigger machine with --host",
            key="gpu_count",
        )


class LocalTarget:
    """Jobs on this machine. ``home`` defaults to $VERI_HOME (~/.veri)."""

    name = "local"

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home) if home is not None else veri_home()

    @property
    def jobs_dir(self) -> Path:
        return self.home / "jobs"

    def job_dir(self, job_id: str) -> Path:
        """The folder of ``job_id``; refuses ids that would leave the jobs folder."""
        if not job_id or "/" in job_id or job_id.startswith("."):
            raise VeriError(f"{job_id!r} is not a job id; `veri-tui jobs` lists them", key="job")
        return self.jobs_dir / job_id

    def start(self, record: JobRecord) -> str:
        """Create the job folder from the job record ``record`` (built by veri_tui.launch.spec,
        paths set for ``self.job_dir(record['job_id'])``) and start its supervisor detached;
        returns the id."""
        job_id = record["job_id"]
        final = self.job_dir(job_id)
        # Build the folder aside and rename it in, so `jobs` never lists a half-made job.
        tmp = self.jobs_dir / f".{job_id}.tmp"
        (tmp / "pids").mkdir(parents=True)
        (tmp / "failures").mkdir()
        write_json_atomic(tmp / JOB_FILE, record)
        os.rename(tmp, final)
        fsync_dir(self.jobs_dir)  # the job exists once its rename is on disk
        self._start_supervisor(final)
        return job_id

    def _start_supervisor(self, job_dir: Path) -> None:
        with open(job_dir / "supervisor.log", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobfolder.supervise", "--job", str(job_dir / JOB_FILE)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=job_dir,
                start_new_session=True,
            )
        _reap()
        _children.append(proc)

    def resume(self, job_id: str, spec: JobSpec | None = None) -> JobRecord:
        """A new attempt of an ended (failed, cancelled or lost) job in its own folder, from
        its newest verified checkpoint (the supervisor chooses it); ``spec`` replaces the
        job's spec (a re-plan). Refused (VeriError) while it runs or once it succeeded."""
        job_dir = self.job_dir(job_id)
        self.get_job(job_id)  # unknown id -> VeriError
        try:
            record = prepare_resume(job_dir / JOB_FILE, spec)
        except ResumeRefused as exc:
            raise VeriError(exc.message, key=exc.key) from None
        self._start_supervisor(job_dir)
        return record

    def list_jobs(self) -> list[JobRecord]:
        """Every job's record, newest first (ids sort by creation time)."""
        _reap()
        if not self.jobs_dir.is_dir():
            return []
        out = []
        for d in sorted(self.jobs_dir.iterdir(), reverse=True):
            if d.name.startswith(".") or not (d / JOB_FILE).is_file():
                continue
            try:
                out.append(read_record(d))
            except VeriError:
                continue  # a foreign or damaged folder must not hide the other jobs
        return out

    def get_job(self, job_id: str) -> JobRecord:
        """The job's record as its folder says now; VeriError for an unknown id."""
        _reap()
        return read_record(self.job_dir(job_id))

    def read_log(self, job_id: str, offset: int = 0) -> bytes:
        """The rank-0 log from byte ``offset`` to its current end (b"" if not written yet)."""
        path = self.job_dir(job_id) / "log.txt"
        self.get_job(job_id)  # unknown id -> VeriError
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read()
        except FileNotFoundError:
            return b""

    def follow_log(self, job_id: str, offset: int = 0, poll_s: float = 0.2) -> Iterator[LogLine]:
        """Complete log lines from ``offset`` on, ending when the job has ended."""
        self.get_job(job_id)
        return follow_lines(
            lambda off: self.read_log(job_id, off),
            lambda: has_ended(self.get_job(job_id)),
            offset,
            poll_s,
        )

    def wait(self, job_id: str, poll_s: float = 0.2) -> JobRecord:
        """Block until the job has ended; returns its final record."""
        return wait_until_ended(lambda: self.get_job(job_id), poll_s)

    def cancel(self, job_id: str, grace: float = GRACE_S) -> JobRecord:
        """End every process of the job (SIGTERM, SIGKILL after ``grace``); status cancelled
        (jobfolder.control.cancel_job: the supervisor does the work when it is alive)."""
        self.get_job(job_id)  # unknown id -> VeriError
        _reap()
        return cancel_job(self.job_dir(job_id) / JOB_FILE, grace)
