"""The job record (job.json) and the other records a job folder holds, every key typed.

Four things are called a record in this project; each has one name:
- the plan record, `veri_tui.plan.PlanRecord`: what `veri-tui plan` decides;
- the job record, `JobRecord`: job.json (its `spec` is the `JobSpec` the trainer runs);
- a rank failure, `RankFailure`: `failures/rank-<r>.json`, written by a failing rank;
- a registry entry, `veri_tui.launch.registry.RegistryEntry`: a job launched over SSH.

A multi-node job has one folder (and one job.json) per node; its spec carries the layout
(`nnodes`, `node_rank`, the rendezvous), and the record the launcher gathers from them adds
`nodes` (`NodeState` each). The field list is docs/interfaces.md section 2.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict, cast

from veri_tui.jobfolder.contract.status import attribution_of

#: job.json's layout version (`format`): 1 since it was written down (issue 28); a folder
#: from before has none and reads as 0 (tests/launch/test_compat.py reads both).
FORMAT = 1


class JobError(TypedDict, total=False):
    """A failed job's `error`: who failed, why, and whose fault (docs/jobs.md)."""

    code: str
    attribution: str
    message: str
    rank: int | None
    node: int | None
    local_rank: int | None
    world_size: int | None
    traceback: str
    summary: str


class JobSpec(TypedDict, total=False):
    """What the trainer runs: job.json's `spec`, built by veri_tui.launch.spec.make_record.
    The multi-node keys are set on every node's copy (docs/ssh.md, "Multi-node jobs")."""

    method: str
    model: str
    model_path: str
    dataset: str  # the first source's path (records before issue 27 have only this)
    datasets: list[dict[str, Any]]  # every source, this machine's paths (source.py)
    eval_datasets: list[dict[str, Any]]  # the eval_loss rows' own sources, when given
    output_dir: str
    gpu: str
    gpu_count: int
    nproc_per_node: int
    device: str
    hyperparameters: dict[str, Any]
    resolved_parallelism: dict[str, Any]
    plan_header: list[str]
    states_bytes_per_gpu: int | None
    step_time_s: float | None  # the plan's predicted step time (the hang watchdog's)
    resume_from: str | None
    nnodes: int  # a multi-node job: the number of nodes (absent: 1)
    node_rank: int  # this folder's node
    rdzv_id: str  # torchrun's c10d rendezvous: the job id
    rdzv_endpoint: str  # addr:port node 0 listens on (node 0) or the others dial
    rdzv_local_addr: str  # the address node 0 is reached at (c10d orders nodes by it)
    hosts: list[str]  # every node's host, node 0 first
    canary: dict[str, Any]  # `--canary K`: steps, max_cost, max_hours, headroom (canary.py)


class Attempt(TypedDict, total=False):
    """One run of the job's torchrun: an entry of job.json's `attempts` (attempts.py).
    `started_s` is the start in epoch seconds and `wall_s` its length (the credit's clock)."""

    attempt: int
    started_at: str | None
    ended_at: str | None
    status: str
    error: JobError | None
    resumed_from_step: int | None
    gpu_count: int
    started_s: float
    wall_s: float
    retry: bool  # started by a multi-node job's watcher after a platform failure


class ResumeChoice(TypedDict, total=False):
    """job.json's `resume_choice`: the step a multi-node job's next attempt starts from,
    chosen by the launcher over every node (the node's supervisor cannot judge it alone)."""

    step: int | None
    where: str
    lines: list[str]
    retry: bool
    after_attempt: int  # refused unless the job has exactly this many attempts


class NodeState(TypedDict):
    """One node of a multi-node job in the gathered record's `nodes`."""

    node: int
    host: str
    status: str


class Scheduler(TypedDict, total=False):
    """`scheduler`: the job's scheduler, when one runs it (a Slurm batch job): its name, the
    job's id there (the handle its launcher's submit got), how often it requeued the job
    (its supervisor records it at every start), and, read-side only, never in job.json, the
    state and reason it gives now (its backend's judge adds them to what a reader sees)."""

    name: str
    id: str
    restarts: int
    state: str
    reason: str


class JobRecord(TypedDict, total=False):
    """The job record: job.json. `lost`, `stale`, `nodes` and `host` on a multi-node job are
    only ever set by readers. The top-level status, error, started_at, ended_at and
    exit_code are the latest attempt's."""

    job_id: str
    format: int  # the layout version (FORMAT); absent: written before it had one
    status: str
    created_at: str
    started_at: str | None
    ended_at: str | None
    host: str | None
    spec: JobSpec
    resolved_parallelism: dict[str, Any]
    error: JobError | None
    exit_code: int
    preflight: list[str]
    predicted: dict[str, Any]  # the plan's figures (veri_tui/launch/measured.py predicted_of)
    # the ranks' measurements (veri_tui/jobfolder/supervise/jobstats.py)
    measured: dict[str, Any] | None
    canary: dict[str, Any]  # the canary's terms, extrapolation and decision (canary.py)
    attempts: list[Attempt]
    credited_gpu_s: float
    resumed_at: str | None
    resume_choice: ResumeChoice | None  # a multi-node resume's step, for its next attempt
    nodes: list[NodeState]  # a multi-node job's nodes, as gathered by the launcher
    scheduler: Scheduler  # the scheduler's id, requeues and (read-side) state
    lost: bool
    stale: bool


class RankFailure(TypedDict, total=False):
    """A rank failure: `failures/rank-<r>.json`, what a rank writes as it fails."""

    rank: int
    local_rank: int
    node: int
    world_size: int
    time_ns: int
    type: str
    code: str
    message: str
    peer_failure: bool
    traceback: str


def scheduler_of(record: Mapping[str, object]) -> Scheduler | None:
    """The record's `scheduler`, or None when no scheduler runs the job. A Slurm job's folder
    written before the block existed keeps `slurm_job_id` and `slurm_restarts` (and a view of
    it `slurm_state`, `slurm_reason`): read as the block."""
    found = record.get("scheduler")
    if isinstance(found, dict):
        return cast(Scheduler, found)
    if "slurm_job_id" not in record:
        return None
    old: Scheduler = {"name": "slurm", "id": str(record["slurm_job_id"])}
    restarts = record.get("slurm_restarts")
    if isinstance(restarts, int):
        old["restarts"] = restarts
    if record.get("slurm_state") is not None:
        old["state"] = str(record["slurm_state"])
    if record.get("slurm_reason") is not None:
        old["reason"] = str(record["slurm_reason"])
    return old


def pending_reason(record: Mapping[str, object]) -> str | None:
    """Why a pending job waits in its scheduler's queue (the reason it gives: Slurm's
    `Resources`, `Priority`, ...); None when it does not wait there or gives none."""
    if record.get("status") != "pending":
        return None
    return (scheduler_of(record) or {}).get("reason") or None


def job_error(
    code: str, message: str, world_size: int | None, summary: str | None = None
) -> JobError:
    """An ``error`` object (docs/interfaces.md section 2), the rank fields still empty."""
    return {
        "code": code,
        "attribution": attribution_of(code),
        "message": message,
        "rank": None,
        "node": None,
        "local_rank": None,
        "world_size": world_size,
        "traceback": "",
        "summary": summary or f"job failed: {message}",
    }


def now_iso() -> str:
    """UTC time as ISO-8601 with seconds, the form job.json uses."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def epoch_of(iso: object) -> float | None:
    """An ISO-8601 time of job.json as epoch seconds; None when absent or unreadable."""
    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None


def read_job(path: Path | str) -> JobRecord:
    """job.json as written (no lost rule: veri_tui/jobfolder/contract/lost.py applies that); raises
    OSError when missing, ValueError when not a JSON object."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return cast(JobRecord, data)


def format_problem(record: Mapping[str, object], path: object) -> str | None:
    """Why this reader cannot read a job record: one written in a newer layout (`format`
    above FORMAT) by a newer veri-tui; None when it can (FORMAT, or older)."""
    found = record.get("format") or 0
    if isinstance(found, int) and found <= FORMAT:
        return None
    return (f"{path}: format {found!r}, written by a newer veri-tui (this one reads up to "
            f"{FORMAT}); upgrade veri-tui to read it")  # fmt: skip


# -- the plan line: the one reader of a plan header's `plan: ...` line ----------------------
# The spec's `plan_header` (what the planner printed, written by veri_tui.launch.spec) is
# printed first in the job log by rank 0; the supervisor's failure report, the hang
# watchdog's, `veri-tui jobs JOB` and the app's monitor quote its plan line from here. A
# header holds one plan line; the first is taken.

PREFIX = "plan:"
NOT_RECORDED = "plan: (not recorded)"


def plan_line(header: object) -> str | None:
    """The first `plan: ...` line of a plan header (a list of lines), or None."""
    if not isinstance(header, list):
        return None
    return next((str(ln) for ln in header if str(ln).startswith(PREFIX)), None)


def plan_line_of(spec: Mapping[str, object] | None, default: str = "") -> str:
    """The plan line of a job spec's `plan_header`, else ``default``."""
    found = plan_line((spec or {}).get("plan_header"))
    return default if found is None else found
