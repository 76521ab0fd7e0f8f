"""Build the job record (job.json, `veri_tui.jobfolder.contract.record.JobRecord`) from a JobConfig
and its PlanRecord, refusing bad input.

The record is the one contract between this side and the trainer (docs/interfaces.md
section 2): every path in it is absolute, the model is a local directory, and the plan header
is copied verbatim so the trainer prints exactly what `veri-tui plan` printed.
Validate-before-start: `launch` refuses what `plan` refuses, plus a model that is not on disk,
a dataset that is missing or has a bad row (veri_tui/launch/job_datasets.py), and an output
directory that already holds something.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.record import FORMAT, JobRecord, JobSpec
from veri_tui.jobfolder.contract.status import PENDING
from veri_tui.jobfolder.data.source import Source
from veri_tui.launch.job_datasets import JobData, job_data, local_data
from veri_tui.launch.measured import predicted_of


def new_job_id() -> str:
    """Sortable by creation time (UTC, seconds), with a random suffix against collisions."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


def _model_path(model: str | None, info: dict[str, Any]) -> tuple[Path | None, Refusal | None]:
    raw = info.get("path")
    if not raw:
        return None, Refusal(
            "model",
            f"{model} is not on this machine (only its Hub metadata was read); "
            f"download it (huggingface-cli download {model}) or pass --model DIR",
        )
    path = Path(raw).expanduser().resolve()
    if not (path / "config.json").is_file():
        return None, Refusal("model", f"{path}: no config.json there; pass a model directory")
    return path, None


def _output_path(output: str | None, job_dir: Path) -> tuple[Path, Refusal | None]:
    if not output:
        return job_dir / "output", None
    path = Path(output).expanduser().resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        return path, Refusal(
            "output", f"{path} already exists and is not empty; choose another --output"
        )
    return path, None


def check_job(job: Any, *, output_here: bool = True) -> None:
    """Raise VeriError with every refusal found before the model is read: the planning core's
    submit rules (what `plan` refuses), a missing dataset, an output dir already in use.

    ``output_here=False`` for a job that runs on another machine (--host): its output dir is
    a path there, checked on that host (veri_tui.launch.ssh), not on this machine.
    """
    from veri_tui.plan import validate

    errors = list(validate(job))
    data_problem = job_data(job)[1]
    # Only the refusal is read: the job folder (the default output's parent) is not made yet.
    output_problem = _output_path(job.output, Path())[1] if output_here else None
    errors += [p for p in (data_problem, output_problem) if p is not None]
    if errors:
        raise VeriError(errors)


def build_record(
    job: Any, plan_record: Any, job_id: str, job_dir: Path, host: str | None = None
) -> JobRecord:
    """The job.json record for ``job`` planned as ``plan_record``; raises VeriError.

    ``job`` is a veri_tui.plan.JobConfig and ``plan_record`` its PlanRecord (typed loosely so
    this module imports nothing heavy). Paths are checked and resolved on this machine, then
    `make_record` writes the layout.
    """
    model, dataset, output, _ = local_paths(job, plan_record, job_dir)
    return make_record(
        job, plan_record, job_id, model_path=model, dataset=dataset, output_dir=output, host=host
    )


def local_paths(job: Any, plan_record: Any, job_dir: Path) -> tuple[str, JobData, str, None]:
    """(model folder, dataset, output dir, None: the model's own name) of a job on this
    machine, each checked and resolved here; raises VeriError (the job's own refusals too)."""
    check_job(job)
    plan = plan_record.to_dict()
    model, problem = _model_path(job.model, plan.get("model") or {})
    if problem is not None:
        raise VeriError(problem)
    dataset = local_data(job)
    output = _output_path(job.output, job_dir)[0]
    return str(model), dataset, str(output), None


def make_record(
    job: Any,
    plan_record: Any,
    job_id: str,
    *,
    model_path: str,
    dataset: JobData | str,
    output_dir: str,
    host: str | None = None,
    model_name: str | None = None,
) -> JobRecord:
    """The job.json record with the paths as given (already checked, and already the paths
    of the machine that will run it): the one place its layout is written down in code.

    No file is looked at here, so the local launch (after `build_record`'s checks) and the
    SSH launch (remote paths, checked on the host) share it. ``spec.model`` is the model as
    the user named it: ``model_name``, else ``job.model``, else ``model_path``.
    """
    plan = plan_record.to_dict()
    resolved = dict(plan["resolved_parallelism"])
    # What `veri-tui plan` prints: the log must carry the "does not fit" warning too.
    warnings = [f"warning: {w}" for w in plan.get("warnings", [])]
    header = [*plan.get("header_lines", []), plan["plan_line"], *warnings]
    spec: JobSpec = {
        "method": job.method,
        "model": model_name or job.model or model_path,
        "model_path": model_path,
        "output_dir": output_dir,
        "gpu": job.gpu,
        "gpu_count": int(job.gpu_count),
        "nproc_per_node": int(job.gpu_count),
        "device": "auto",
        "hyperparameters": job.hyperparameters.to_dict(mode="json", exclude_none=True),
        "resolved_parallelism": resolved,
        "plan_header": header,
        "states_bytes_per_gpu": plan.get("states_bytes_per_gpu"),
        # The hang watchdog's first timeout scales with it
        # (veri_tui/jobfolder/supervise/watchdog.py).
        "step_time_s": (plan.get("throughput") or {}).get("step_time_s"),
    }
    if isinstance(dataset, str):  # one file's path, as before issue 27
        dataset = JobData((Source(dataset),))
    spec.update(dataset.spec())  # type: ignore[typeddict-item]
    return {
        "job_id": job_id,
        "format": FORMAT,
        "status": PENDING,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "started_at": None,
        "ended_at": None,
        "host": host,
        "spec": spec,
        "resolved_parallelism": dict(resolved),
        "error": None,
        # What the plan expects of the run; the supervisor adds `measured` beside it.
        "predicted": predicted_of(plan),
    }


def canary_spec(steps: int | None, **limits: float | None) -> dict[str, Any] | None:
    """The spec's `canary` (docs/canary.md): ``steps`` and the limits given (max_cost,
    max_hours, headroom); None without ``steps``. VeriError names the flag of a bad one."""
    given = {k: v for k, v in limits.items() if v is not None}
    if steps is None:
        if given:
            flags = ", ".join(f"--{k.replace('_', '-')}" for k in given)
            verb = "judges" if len(given) == 1 else "judge"
            raise VeriError(f"{flags} {verb} a canary: add --canary", key="canary")
        return None
    if steps < 1:
        raise VeriError(f"--canary {steps}: K is a number of steps, 1 or more", key="canary")
    for key in ("max_cost", "max_hours"):
        if given.get(key) is not None and given[key] <= 0:
            raise VeriError(f"--{key.replace('_', '-')} {given[key]:g}: must be above 0", key)
    if not 0 <= given.get("headroom", 0) < 1:
        raise VeriError(f"--headroom {given['headroom']:g}: a share, 0 to below 1", "headroom")
    return {"steps": steps, **given}
