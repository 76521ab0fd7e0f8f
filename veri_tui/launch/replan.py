"""The spec of a resumed job: the same plan, or a re-plan for a new gpu_count or `--set`.

`veri-tui resume JOB` keeps the job's spec as it is unless told otherwise. With
`--gpu-count N` or `--set KEY=VALUE` the job is planned again (veri_tui.plan) from its own
hyperparameters, keeping the global batch it had: the trainer's loss is averaged over the
global batch and its batches are drawn by (seed, step, global batch size), so the resumed run
sees the same data and, at another world size, nearly the same updates (DCP reshards the
checkpoint on load). grad_acc is rescaled; micro_batch_size is kept, or lowered to the
largest size that splits the batch; a global batch that N cannot split is refused with
`error: gpu_count: ...`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.record import JobRecord, JobSpec

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

#: Plan knobs that follow from the others and the world size: never pinned on a re-plan.
DERIVED = ("data_parallel_size", "gradient_accumulation_steps")
#: Plan knobs kept from the job's plan unless set again (zero_stage stays as the user gave it:
#: a requested stage is kept, "auto" decides again for the new world size).
KEPT = ("global_batch_size", "micro_batch_size", "precision", "gradient_checkpointing")


def split_batch(gbs: int, mbs: int, gpu_count: int) -> int:
    """The micro-batch size for ``gbs`` over ``gpu_count`` ranks: ``mbs``, or the largest
    size below it that divides each rank's share; VeriError when the share is not whole."""
    if gpu_count < 1:
        raise VeriError(f"{gpu_count}: must be at least 1", key="gpu_count")
    if gbs % gpu_count:
        from veri_tui.plan.gpus import gpus_text  # only for this refusal

        raise VeriError(
            f"{gpus_text(gpu_count)} cannot split the job's global batch of {gbs} samples "
            f"(global_batch_size must be a multiple of gpu_count); choose a gpu_count that "
            f"divides {gbs}, or pass --set global_batch_size=... to change the batch",
            key="gpu_count",
        )
    share = gbs // gpu_count
    return max(d for d in range(1, min(mbs, share) + 1) if share % d == 0)


def set_by_user(hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters whose value is not the knob's own default. The spec records
    every hyperparameter (the defaults too) and cannot tell which the user set: passing the
    defaults on would make them "set" for the re-plan, which then warns about keys the user
    never wrote (a resumed sft_text job: "max_length applies to dpo"). Left unset they mean
    the same value."""
    from veri_tui.jobfolder.knobs.schema import by_name
    from veri_tui.plan.knobs import Hyperparameters

    knobs = by_name(Hyperparameters)
    return {
        k: v
        for k, v in hyperparameters.items()
        if k not in knobs or knobs[k].default is None or knobs[k].default != v
    }


def resume_fields(spec: JobSpec, gpu_count: int | None, sets: dict[str, Any]) -> dict[str, Any]:
    """The job fields (job keys and knobs at top level, as `job_from_fields` takes them) of
    the re-planned job."""
    rp = dict(spec.get("resolved_parallelism") or {})
    hp = set_by_user(spec.get("hyperparameters") or {})
    hp = {k: v for k, v in hp.items() if k not in DERIVED}
    count = int(gpu_count or spec.get("gpu_count") or 1)
    pins = {k: rp[k] for k in KEPT if k in rp}
    if "cpu_offload" in rp:
        pins["cpu_offload"] = rp["cpu_offload"]
    if "global_batch_size" not in sets and "global_batch_size" in pins:
        mbs = int(sets.get("micro_batch_size") or pins.get("micro_batch_size") or 1)
        pins["micro_batch_size"] = split_batch(int(pins["global_batch_size"]), mbs, count)
    elif "global_batch_size" in sets:
        pins.pop("global_batch_size", None)
    fields = {**hp, **pins, **sets}
    fields.update(
        method=spec.get("method"),
        model=spec.get("model_path"),
        gpu=spec.get("gpu"),
        gpu_count=count,
        dataset=spec.get("datasets") or spec.get("dataset"),
    )
    if spec.get("eval_datasets"):
        fields["eval_dataset"] = spec["eval_datasets"]
    return fields


def resume_spec(
    record: JobRecord,
    gpu_count: int | None,
    sets: Sequence[str],
    plan_for: Callable[[JobConfig], tuple[JobConfig, PlanRecord]],
    force: bool = False,
) -> JobSpec | None:
    """The spec the resumed attempt runs: None to keep the job's own (no new gpu_count, no
    `--set`), else the re-planned spec with the job's paths. ``plan_for(job)`` returns the
    (job, plan record) as the target plans it (here: `plan_job`; a host: its preflight).
    Raises VeriError for every refusal."""
    from veri_tui.launch.job_datasets import JobData
    from veri_tui.launch.spec import make_record
    from veri_tui.plan import job_from_fields, validate
    from veri_tui.plan.config import parse_sets

    spec = record["spec"]
    values, errors = parse_sets(sets)
    if errors:
        raise VeriError(errors)
    same_count = gpu_count is None or int(gpu_count) == int(spec.get("gpu_count") or 1)
    if same_count and not values and not force:  # force: a new layout, the same rank count
        return None
    fields = resume_fields(spec, gpu_count, values)
    job = job_from_fields(fields)
    refusals: list[Refusal] = list(validate(job))
    if refusals:
        raise VeriError(refusals)
    job, plan = plan_for(job)
    new = make_record(
        job,
        plan,
        record["job_id"],
        model_path=str(spec.get("model_path")),
        dataset=JobData.from_spec(spec),
        output_dir=str(spec.get("output_dir")),
        host=record.get("host"),
        model_name=spec.get("model"),
    )["spec"]
    return new
