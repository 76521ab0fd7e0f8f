"""The supervisor inside a Slurm allocation: srun, the nodes' logs, signals, requeues.

The batch script (docs/slurm.md) `exec`s `python -m veri_tui.jobfolder.supervise --job J` on the
allocation's first node. When J's spec has `slurm` and $SLURM_JOB_ID is set, the supervisor
runs in this mode (`SlurmRun`):

- one `srun --nodes=N --ntasks-per-node=1 --kill-on-bad-exit=1` task per node runs
  `python -m veri_tui.jobfolder.supervise --job J --slurm-task HOST:PORT`, which `exec`s that node's
  torchrun (`node_spec`: c10d rendezvous on the first host of `scontrol show hostnames`, id
  $SLURM_JOB_ID, node k = $SLURM_NODEID) with its log dir and output in `elastic/node<k>/`
  of the one job folder all nodes share (`node_logs`: what the failure report reads);
- the ranks get `STOP_ENV` and `SHARED_ENV` (veri_tui/jobfolder/contract/stopping.py): they stop at
  a step boundary on request, and save one global checkpoint and token cache;
- a signal is read by `classify`: SIGTERM with `cancel.request` is a cancel; SIGTERM while
  Slurm requeues the job (its restart count rose), or with the job still running (a
  preemption's grace), is a preemption; SIGTERM while the job completes with no requeue is
  someone's `scancel`, a cancel; SIGUSR1 (`--signal=B:USR1@120`) is the time limit coming,
  unless the job has none (then a preemption that sends the user signal);
- a cancel, once recorded, `scancel`s the job itself, so that Slurm's accounting agrees
  (CANCELLED, not FAILED with the torchrun's exit code).

Stdlib only, like the supervisor.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import ELASTIC, TORCHRUN_LOG
from veri_tui.jobfolder.contract.record import Scheduler
from veri_tui.jobfolder.contract.stopping import (
    PREEMPTED,
    SHARED_ENV,
    STOP_ENV,
    TIME_LIMIT,
    cancel_requested,
)

CANCEL = "cancel"
#: SIGUSR1 with more time left than this is no time limit (a preemption's user signal).
TIME_LIMIT_NEAR_S = 300


def scontrol(*args: str, timeout: float = 20) -> str:
    """`scontrol ARGS`' stdout; RuntimeError when it fails."""
    out = subprocess.run(
        ["scontrol", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"scontrol {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out.stdout


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job -o ID` as {field: value} (JobState, Restarts, TimeLimit, ...)."""
    line = scontrol("show", "job", "-o", job_id)
    return {m.group(1): m.group(2) for m in re.finditer(r"(\w+)=(\S*)", line)}


def seconds(text: str) -> int | None:
    """Slurm's `[D-]HH:MM:SS` (or MM:SS) as seconds; None for UNLIMITED or unreadable."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    d, h, mi, s = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def node_log_dir(job_dir: Path, node: int) -> Path:
    """`elastic/node<k>/`: node k's torchrun log dir; its output is `torchrun.log` there."""
    return Path(job_dir) / ELASTIC / f"node{node}"


def node_logs(job_dir: Path, nnodes: int) -> list[tuple[int, Path, Path]]:
    """(node, torchrun log dir, torchrun output) of every node: the failure report's sources."""
    dirs = [(k, node_log_dir(job_dir, k)) for k in range(nnodes)]
    return [(k, d, d / TORCHRUN_LOG) for k, d in dirs]


def node_spec(spec: Mapping[str, Any], endpoint: str, node: int, job_id: str) -> dict[str, Any]:
    """``spec`` with the multi-node keys the supervisor's torchrun command reads, for node
    ``node`` of the allocation (the rendezvous host, node 0, is the first host)."""
    host = endpoint.rsplit(":", 1)[0]
    layout = {"node_rank": node, "rdzv_endpoint": endpoint, "rdzv_id": f"slurm-{job_id}"}
    return {**spec, **layout, "rdzv_local_addr": host}


@dataclass
class SlurmRun:
    """This allocation, as the supervisor on its first node sees it."""

    job_id: str
    restarts: int  # $SLURM_RESTART_COUNT: how often Slurm requeued the job
    hosts: list[str]
    nnodes: int

    @classmethod
    def from_env(cls, spec: Mapping[str, Any]) -> SlurmRun | None:
        """The allocation when ``spec`` is a Slurm job's and this runs inside one, else None."""
        job_id = os.environ.get("SLURM_JOB_ID")
        if not spec.get("slurm") or not job_id:
            return None
        nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
        hosts = scontrol("show", "hostnames", nodelist).split() if nodelist else []
        nnodes = int(spec.get("nnodes") or (spec.get("slurm") or {}).get("nodes") or 1)
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        return cls(job_id, restarts, hosts or [socket.gethostname()], nnodes)

    def endpoint(self) -> str:
        """`<first host>:<port>`: the c10d rendezvous. The port is free here, on the first
        node, where the batch script (this supervisor) runs."""
        with socket.socket() as s:
            s.bind(("", 0))
            return f"{self.hosts[0]}:{s.getsockname()[1]}"

    def command(self, spec: Mapping[str, Any], job_path: Path) -> list[str]:
        """srun starting one task per node, each `exec`ing its node's torchrun."""
        out = str(node_log_dir(Path(job_path).parent, 0)).removesuffix("0") + "%n"
        for k in range(self.nnodes):  # srun opens the output files; it makes no folders
            node_log_dir(Path(job_path).parent, k).mkdir(parents=True, exist_ok=True)
        cpus = os.environ.get("SLURM_CPUS_PER_TASK")
        return [
            "srun", f"--nodes={self.nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            *([f"--cpus-per-task={cpus}"] if cpus else []),
            f"--output={out}/{TORCHRUN_LOG}",
            sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(job_path),
            "--slurm-task", self.endpoint(),
        ]  # fmt: skip

    @staticmethod
    def environment(env: dict[str, str]) -> dict[str, str]:
        """The ranks' environment: stop requests on, one job folder for every node."""
        return dict(env, **{STOP_ENV: "1", SHARED_ENV: "1"})

    def classify(self, signum: int, job_dir: Path) -> tuple[str, bool]:
        """(what the signal means: CANCEL, PREEMPTED or TIME_LIMIT; whether the supervisor
        must requeue the job itself once its ranks stopped, since Slurm will not)."""
        if cancel_requested(job_dir):
            return CANCEL, False
        try:
            fields = job_fields(self.job_id)
        except (OSError, RuntimeError, subprocess.SubprocessError):
            fields = {}  # the controller did not answer: assume the kinder reading
        requeued = int(fields.get("Restarts") or self.restarts) > self.restarts
        state = fields.get("JobState", "")
        if signum == signal.SIGUSR1:
            limit = seconds(fields.get("TimeLimit", "UNLIMITED"))
            left = None if limit is None else limit - (seconds(fields.get("RunTime", "")) or 0)
            if left is not None and left <= TIME_LIMIT_NEAR_S:
                return TIME_LIMIT, False
            return PREEMPTED, not requeued
        if requeued or not fields:
            return PREEMPTED, False
        if state in ("CANCELLED", "COMPLETING"):
            return CANCEL, False  # a plain `scancel`: the job ends, nothing requeues it
        return PREEMPTED, True  # still running: a preemption's grace period

    def end_cancelled(self) -> int:
        """After a cancel is recorded: `scancel` this job, so that Slurm's own accounting
        (sacct, scontrol) says CANCELLED rather than FAILED NonZeroExitCode (the ranks were
        ended by a signal); 0, so that the batch script exits cleanly should scancel fail
        (then the job is COMPLETED)."""
        try:
            subprocess.run(["scancel", self.job_id], capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
        return 0

    def requeue(self) -> str | None:
        """`scontrol requeue` this job; None, or why it failed."""
        try:
            scontrol("requeue", self.job_id)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return str(exc)
        return None


def scheduler_block(run: SlurmRun) -> Scheduler:
    """What job.json records of the allocation: its `scheduler` (id, requeues)."""
    return {"name": "slurm", "id": run.job_id, "restarts": run.restarts}
