"""The job folder's layout: every file and folder name, once, and where job folders live.

    <veri home>/jobs/<job id>/          (a multi-node job: <job id>-node<k>, one per node)
      job.json, job.json.lock           the job record and its lock (record.py, atomic.py)
      log.txt, metrics.jsonl            rank 0's log and metric lines
      supervisor.pid, torchrun.pid      the supervisor's and its torchrun's pids
      supervisor.log                    the supervisor's own output
      cancel.request                    a Slurm job's cancel, written before scancel
      stop.request, stopped.json        stop at a step boundary: asked, done (stopping.py)
      pids/rank-<r>                     each rank's pid (procs.py)
      failures/rank-<r>.json            a failing rank's record (failures.py)
      elastic/, torchrun.log, exit_code one attempt's torchrun files (attempts.py)
      attempts/<n>/                     an earlier attempt's files, archived
      progress/rank-<r>                 each rank's step and phase (progress.py)
      forensics/                        dump requests, each rank's answer rank-<r>.json, and
                                        NCCL's dumps on timeout (forensics.py; per attempt)
      measured/run-rank-<r>.json        each rank's measurements (jobstats.py)
      canary/rank-<r>.json, decision.json  the canary's measurements, the gate (canary.py)
      checkpoints/step-<n>/             committed checkpoints (ckptindex.py)
      tokens/                           the token cache (veri_tui/trainer/tokencache.py)
      output/                           the artifact unless --output names another place
      pkg/, data/, model/               on an SSH host: the uploaded code, dataset, model

`JobLayout` gives those paths for a job folder given as a local `Path` or, for a folder on
an SSH host, a `PurePosixPath`. `veri_home()` is the one reading of $VERI_HOME.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath
from typing import Generic, TypeVar

JOB_FILE = "job.json"
LOG = "log.txt"
METRICS = "metrics.jsonl"
SUPERVISOR_PID = "supervisor.pid"
TORCHRUN_PID = "torchrun.pid"
SUPERVISOR_LOG = "supervisor.log"
PIDS = "pids"
FAILURES = "failures"
ELASTIC = "elastic"
TORCHRUN_LOG = "torchrun.log"
EXIT_CODE = "exit_code"
#: Written by a Slurm job's cancel before `scancel --signal=TERM`: the supervisor's SIGTERM is
#: then a cancel, not a preemption (docs/slurm.md).
CANCEL_REQUEST = "cancel.request"
STOP_REQUEST = "stop.request"
STOPPED = "stopped.json"
#: Written on a node by a multi-node job's watcher before it SIGTERMs that node's supervisor
#: because another node failed: the SIGTERM is then that failure's, never a cancel.
PEER_FAILED = "peer_failed.json"
ATTEMPTS = "attempts"
PROGRESS = "progress"
FORENSICS = (
    "forensics"  # dump requests and the ranks' answers (veri_tui/jobfolder/failures/forensics.py)
)
MEASURED = "measured"
#: The canary's per-rank measurements and the gate's decision (canary.py).
CANARY = "canary"
CHECKPOINTS = "checkpoints"
TOKENS = "tokens"
OUTPUT = "output"
PKG, DATA, MODEL = "pkg", "data", "model"
#: What one attempt of torchrun leaves in the job folder; archived before the next.
PER_ATTEMPT = (FAILURES, ELASTIC, TORCHRUN_LOG, EXIT_CODE, STOP_REQUEST, STOPPED, PEER_FAILED,
               FORENSICS, CANARY)  # fmt: skip
#: The folders a new job folder is made with (an SSH host's also gets PKG and DATA).
MADE_WITH = (PIDS, FAILURES)

P = TypeVar("P", bound=PurePath)


def veri_home() -> Path:
    """$VERI_HOME, default ~/.veri: job folders, the registry, calibration, prices, caches."""
    return Path(os.environ.get("VERI_HOME") or Path.home() / ".veri").expanduser()


def jobs_dir(home: P) -> P:
    """`<home>/jobs`: where the job folders are."""
    return home / "jobs"


def node_folder_name(job_id: str, node: int | None) -> str:
    """A job folder's name: the job id, or `<id>-node<k>` for node k of a multi-node job."""
    return job_id if node is None else f"{job_id}-node{node}"


class JobLayout(Generic[P]):
    """The paths of one job folder (``root``: a local Path or a remote PurePosixPath)."""

    def __init__(self, root: P) -> None:
        self.root = root

    def __truediv__(self, name: str) -> P:
        return self.root / name

    @property
    def job(self) -> P:
        return self.root / JOB_FILE

    @property
    def log(self) -> P:
        return self.root / LOG

    @property
    def metrics(self) -> P:
        return self.root / METRICS

    @property
    def supervisor_pid(self) -> P:
        return self.root / SUPERVISOR_PID

    @property
    def torchrun_pid(self) -> P:
        return self.root / TORCHRUN_PID

    @property
    def supervisor_log(self) -> P:
        return self.root / SUPERVISOR_LOG

    @property
    def torchrun_log(self) -> P:
        return self.root / TORCHRUN_LOG

    @property
    def checkpoints(self) -> P:
        return self.root / CHECKPOINTS

    @property
    def pkg(self) -> P:
        return self.root / PKG

    def rank_pid(self, rank: int) -> P:
        return self.root / PIDS / f"rank-{rank}"

    def rank_failure(self, rank: int) -> P:
        return self.root / FAILURES / f"rank-{rank}.json"

    def rank_progress(self, rank: int) -> P:
        return self.root / PROGRESS / f"rank-{rank}"

    def rank_forensics(self, rank: int) -> P:
        return self.root / FORENSICS / f"rank-{rank}.json"

    def rank_measured(self, rank: int) -> P:
        return self.root / MEASURED / f"run-rank-{rank}.json"

    def attempt_archive(self, attempt: int) -> P:
        return self.root / ATTEMPTS / str(attempt)
