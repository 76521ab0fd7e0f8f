"""The job's datasets on this machine: the training mixture and the eval sources named by a
JobConfig (`dataset`, `eval_dataset`; the method's bundled dataset when none is given and
the model is a bundled one, else refused), resolved here and every row checked before
anything is uploaded or submitted.

JobData is what a launch carries to the record (veri_tui/launch/spec.py writes its
`spec()` into job.json) and to an upload (its `files()`); a remote job's paths are the
host's, made from these (veri_tui/launch/ssh, slurm).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veri_tui.bundled import assets_dir, bundled_dataset
from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.source import Source, files_of

#: The bundled dataset each method trains on when no --dataset is given.
BUNDLED_DATASETS = {
    "sft_text": bundled_dataset("sft.jsonl"),
    "dpo": bundled_dataset("dpo.jsonl"),
}


#: Your model on the bundled 64-row toy sample would "succeed" and teach it nothing.
NO_DATASET = (
    "no dataset given: pass --dataset FILE (JSONL, Parquet, CSV, a save_to_disk folder or a "
    "Hub id org/name; veri.toml: dataset = ...); only the bundled tiny model trains on the "
    "bundled sample"
)


def is_bundled_model(model: str | None) -> bool:
    """No model given (the bundled tiny one), or a model folder of the bundled assets
    (tiny-model, tiny-moe): the models the bundled samples are for."""
    if not model:
        return True
    try:
        return Path(model).expanduser().resolve().is_relative_to(assets_dir().resolve())
    except OSError:
        return False


@dataclass(frozen=True)
class JobData:
    """The job's datasets as one machine reads them: the training mixture and the eval
    sources (veri_tui/jobfolder/data/source.py), each with its path there."""

    train: tuple[Source, ...]
    eval: tuple[Source, ...] = ()

    def __str__(self) -> str:
        from veri_tui.plan.dataset_locations import describe

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
        from veri_tui.jobfolder.data.source import sources_of

        train = sources_of(spec.get("datasets") or spec.get("dataset"))
        return cls(tuple(train), tuple(sources_of(spec.get("eval_datasets"))))

    def files(self) -> list[Path]:
        """Every file the sources are read from (what an upload copies)."""
        return [f for s in (*self.train, *self.eval) for f in files_of(Path(s.path))]


def job_data(job: Any) -> tuple[JobData | None, Refusal | None]:
    """The job's datasets on this machine (a Hub id from the local HF cache, downloaded
    when it is not there and HF_HUB_OFFLINE is unset), every row checked (`check_rows`)."""
    from veri_tui.plan.dataset_locations import job_sources

    try:
        train = job_sources(job, "dataset", download=True)
        evals = job_sources(job, "eval_dataset", download=True)
    except DataError as exc:
        key = "eval_dataset" if str(exc).startswith("eval_dataset") else "dataset"
        return None, Refusal(key, str(exc).removeprefix(f"{key}: "))
    if not train:
        if not is_bundled_model(job.model):
            return None, Refusal("dataset", NO_DATASET)
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
    (veri_tui/jobfolder/data/rows.py `check_row`): the first bad one as a refusal naming its file
    and line (a source's row), before anything is uploaded or submitted. Remembered per
    process by the files' stats, so a preflight and its launch read a dataset once."""
    from veri_tui.jobfolder.data.dataload import mixed_rows
    from veri_tui.jobfolder.data.rows import check_row
    from veri_tui.jobfolder.data.source import stat_key

    for key, sources in (("dataset", data.train), ("eval_dataset", data.eval)):
        if not sources:
            continue
        memo = (stat_key(list(sources)), method)
        if memo not in _CHECKED:
            found = None
            try:
                n = 0
                for where, row in mixed_rows(list(sources), method=method):
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


def local_data(job: Any) -> JobData:
    """The job's datasets on this machine: ``job.dataset`` (and ``eval_dataset``) resolved,
    else the method's bundled one; VeriError for a source that is missing or has a bad row
    (a remote job uploads them from here)."""
    data, problem = job_data(job)
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
    return job.copy_with(update=update)
