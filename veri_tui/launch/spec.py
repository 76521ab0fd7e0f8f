"""Build the job record (job.json, `jobfolder.record.JobRecord`) from a JobConfig and its
PlanRecord, refusing bad input.

The record is the one contract between this side and the trainer (docs/interfaces.md
section 2): every path in it is absolute, the model is a local directory, and the plan header
is copied verbatim so the trainer prints exactly what `veri-tui plan` printed.
Validate-before-start: `launch` refuses what `plan` refuses, plus a model that is not on disk,
a dataset that is missing, and an output directory that already holds something.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobfolder.datasource import Source, files_of
from jobfolder.errors import DataError
from jobfolder.record import JobRecord, JobSpec
from jobfolder.status import PENDING
from veri_tui.bundled import bundled_dataset
from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.measured import predicted_of

#: The bundled dataset each method trains on when no --dataset is given.
BUNDLED_DATASETS = {
    "sft_text": bundled_dataset("sft.jsonl"),
    "dpo": bundled_dataset("dpo.jsonl"),
}


def new_job_id() -> str:
    """Sortable by creation time (UTC, seconds), with a random suffix against collisions."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


@dataclass(frozen=True)
class JobData:
    """The job's datasets as one machine reads them: the training mixture and the eval
    sources (jobfolder/datasource.py), each with its path there."""

    train: tuple[Source, ...]
    eval: tuple[Source, ...] = ()

    def __str__(self) -> str:
        from veri_tui.plan.data_sources import describe

        text = describe(list(self.train))
        return text + (f"; eval: {describe(list(self.eval))}" if self.eval else "")

    def spec(self) -> dict[str, Any]:
        """job.json's keys: `dataset` (the first source's path, as older records have it),
        `datasets` (the mixture) and `eval_datasets` when there are any."""
        out: dict[str, Any] = {"dataset": self.train[0].path,
                               "datasets": [s.to_dict() for s in self.train]}  # fmt: skip
        if self.eval:
            out["eval_datasets"] = [s.to_dict() for s in self.eval]
        return out

    @classmethod
    def from_spec(cls, spec: Any) -> JobData:
        """The datasets a job.json spec names (its paths as they are)."""
        from jobfolder.datasource import sources_of

        train = sources_of(spec.get("datasets") or spec.get("dataset"))
        return cls(tuple(train), tuple(sources_of(spec.get("eval_datasets"))))

    def files(self) -> list[Path]:
        """Every file the sources are read from (what an upload copies)."""
        return [f for s in (*self.train, *self.eval) for f in files_of(Path(s.path))]


def _job_data(job: Any) -> tuple[JobData | None, Refusal | None]:
    """The job's datasets on this machine (a Hub id from the local HF cache, downloaded
    when it is not there and HF_HUB_OFFLINE is unset), every row checked (`check_rows`)."""
    from veri_tui.plan.data_sources import job_sources

    try:
        train = job_sources(job, "dataset", download=True)
        evals = job_sources(job, "eval_dataset", download=True)
    except DataError as exc:
        key = "eval_dataset" if str(exc).startswith("eval_dataset") else "dataset"
        return None, Refusal(key, str(exc).removeprefix(f"{key}: "))
    if not train:
        bundled = BUNDLED_DATASETS.get(job.method)
        if bundled is None or not bundled.is_file():
            return None, Refusal("dataset", f"no bundled dataset for {job.method}; pass --dataset")
        train = [Source(str(bundled))]
    data = JobData(tuple(train), tuple(evals))
    problem = check_rows(data, job.method)
    return (None, problem) if problem else (data, None)


_CHECKED: dict[tuple[Any, ...], str | None] = {}  # the first bad row's message, or None


def check_rows(data: JobData, method: str) -> Refusal | None:
    """Every row the trainer will read, checked as it checks them before any tokenizer
    (jobfolder/rows.py `check_row`): the first bad one as a refusal naming its file and
    line (a source's row), before anything is uploaded or submitted. Remembered per
    process by the files' stats, so a preflight and its launch read a dataset once."""
    from jobfolder.dataload import mixed_rows
    from jobfolder.datasource import stat_key
    from jobfolder.rows import check_row

    for key, sources in (("dataset", data.train), ("eval_dataset", data.eval)):
        if not sources:
            continue
        memo = (stat_key(list(sources)), method)
        if memo not in _CHECKED:
            found = None
            try:
                n = 0
                for where, row in mixed_rows(list(sources)):
                    check_row(row, method, where)
                    n += 1
                if n == 0:
                    found = f"{sources[0].label}: the dataset has no rows"
            except DataError as exc:
                found = exc.message
            _CHECKED[memo] = found
        message = _CHECKED[memo]
        if message is not None:
            return Refusal(key, message)
    return None


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
    data_problem = _job_data(job)[1]
    # Only the refusal is read: the job folder (the default output's parent) is not made yet.
    output_problem = _output_path(job.output, Path())[1] if output_here else None
    errors += [p for p in (data_problem, output_problem) if p is not None]
    if errors:
        raise VeriError(errors)


def local_data(job: Any) -> JobData:
    """The job's datasets on this machine: ``job.dataset`` (and ``eval_dataset``) resolved,
    else the method's bundled one; VeriError for a source that is missing or has a bad row
    (a remote job uploads them from here)."""
    data, problem = _job_data(job)
    if problem is not None:
        raise VeriError(problem)
    assert data is not None
    return data


def data_bytes(job: Any) -> int:
    """The bytes of the job's dataset files here (what an upload sends); VeriError as
    `local_data`."""
    return sum(f.stat().st_size for f in local_data(job).files())


def with_data(job: Any) -> Any:
    """The job as it is planned where it trains: its datasets resolved here (the bundled
    one when none is given), so the plan's cost counts their tokens."""
    data = local_data(job)
    value: Any = [s.to_dict() for s in data.train]
    update = {"dataset": value[0] if len(value) == 1 else value}
    if data.eval:
        update["eval_dataset"] = [s.to_dict() for s in data.eval]
    return job.model_copy(update=update)


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
        "hyperparameters": job.hyperparameters.model_dump(mode="json", exclude_none=True),
        "resolved_parallelism": resolved,
        "plan_header": header,
        "states_bytes_per_gpu": plan.get("states_bytes_per_gpu"),
        # The hang watchdog's first timeout scales with it (jobfolder/watchdog.py).
        "step_time_s": (plan.get("throughput") or {}).get("step_time_s"),
    }
    if isinstance(dataset, str):  # one file's path, as before issue 27
        dataset = JobData((Source(dataset),))
    spec.update(dataset.spec())  # type: ignore[typeddict-item]
    return {
        "job_id": job_id,
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
