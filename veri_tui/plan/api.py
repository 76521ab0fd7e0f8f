"""The notebook / script API: one call from job fields to the plan record.

    >>> from veri_tui.plan import plan
    >>> rec = plan(model="Qwen/Qwen3-0.6B", gpu="L4-24GB", gpu_count=4, lora_rank=16)
    >>> print(rec.plan_line)

Errors raise `veri_tui.errors.VeriError`, whose `.errors` lists every refusal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.knobs import Job
from veri_tui.plan.config import job_from_fields
from veri_tui.plan.decide import states_for
from veri_tui.plan.gpus import get_gpu
from veri_tui.plan.knobs import JobConfig
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.record import PlanRecord
from veri_tui.plan.throughput import estimate_throughput
from veri_tui.plan.validate import validate


def plan(
    model: str | None = None,
    method: str = Job.method,  # the schema's defaults (jobfolder/knobs/job.py)
    gpu: str = Job.gpu,
    gpu_count: int = Job.gpu_count,
    dataset: str | None = None,
    output: str | None = None,
    **hyperparameters: Any,
) -> PlanRecord:
    """Plan a job from its fields; the record is what `veri-tui plan --json` prints.

    `model` is a local checkpoint folder or a Hub id (None: the bundled tiny model); every
    knob of `Hyperparameters` may be passed by name (e.g. `zero_stage=3, lora_rank=16`).
    Raises VeriError carrying every refusal.
    """
    from veri_tui.plan.resolve import plan_job

    fields = {
        "model": model,
        "method": method,
        "gpu": gpu,
        "gpu_count": gpu_count,
        "dataset": dataset,
        "output": output,
        **hyperparameters,
    }
    return plan_job(job_from_fields(fields))


# Refusals that hold at one gpu_count and not another (gpu_count itself: a count that does not
# split over the job's nodes): the sweep skips that point. The
# stage is the sweep's own variable, so the job's zero_stage / cpu_offload rules do not apply.
PER_COUNT_KEYS = ("gpu_count", "global_batch_size", "use_unsloth", "load_in_4bit", "use_liger")
SWEPT_KEYS = ("zero_stage", "cpu_offload")


def _sweep_variant(job: JobConfig, n: int) -> JobConfig:
    """The job at `n` GPUs with the same optimizer batch: a set global_batch_size is kept and
    grad_acc is left for `batch_sizes` to rederive (gbs / (mbs x n))."""
    hp = job.hyperparameters
    update: dict[str, Any] = {"data_parallel_size": None}
    if hp.global_batch_size is not None:
        update["gradient_accumulation_steps"] = None
    return job.copy_with(update={"gpu_count": n, "hyperparameters": hp.copy_with(update=update)})


def _skip_reason(job: JobConfig, errors: list[Refusal]) -> str:
    hp = job.hyperparameters
    out = []
    for e in errors:
        if e.key == "global_batch_size":
            out.append(
                f"global_batch_size {hp.global_batch_size} is not a multiple of "
                f"micro_batch_size ({hp.micro_batch_size}) x gpu_count"
            )
        else:
            out.append(f"{e.key}: {e.message}")
    return "; ".join(out)


def throughput_sweep(
    job: JobConfig,
    info: ModelInfo,
    gpu_counts: Iterable[int],
    stages: Iterable[int] = (0, 2, 3),
    host: str | None = None,
) -> list[dict[str, Any]]:
    """Throughput (and states) of this job at each gpu_count x zero_stage.

    Single-GPU rows have stage 0 only (nothing to shard). Each row is the throughput dict
    plus `states_bytes_per_gpu` and `fits`. Global batch: the job's global_batch_size when
    set (grad_acc rescaled to keep it), else mbs x grad_acc x gpu_count. A gpu_count where
    the job cannot run (the gbs does not divide, a single-GPU-only knob) is one row
    `{"known": False, "skipped": True, "gpu_count": n, "reason": ...}`. Raises VeriError
    for refusals that hold at every gpu_count (the job itself is refused). Every point is
    estimated as `plan_job` estimates its own (`resolve.throughput_args`: nodes, network,
    checkpointing's recompute) and calibrated for ``host`` as it is, so the point at the
    job's own gpu_count and stage is the plan's throughput.
    """
    from veri_tui.plan.calibration import calibration_for
    from veri_tui.plan.resolve import lora_info, throughput_args

    gpu = get_gpu(job.gpu)
    info = lora_info(job, info)
    calibration, _ = calibration_for(gpu.name, host)
    rows: list[dict[str, Any]] = []
    stages = tuple(stages)
    for n in gpu_counts:
        variant = _sweep_variant(job, n)
        errors = [e for e in validate(variant) if e.key not in SWEPT_KEYS]
        fatal = [e for e in errors if e.key not in PER_COUNT_KEYS]
        if fatal:
            raise VeriError(fatal)
        if errors:
            reason = _skip_reason(job, errors)
            rows.append({"known": False, "skipped": True, "gpu_count": n, "reason": reason})
            continue
        for z in stages if n > 1 else (0,):
            est = states_for(variant, info, z)
            args = throughput_args(variant, info, z)
            args["cpu_offload"] = args["cpu_offload"] and z == 3
            row = calibration.throughput(estimate_throughput(info, gpu, **args))
            row["states_bytes_per_gpu"] = est.states_bytes_per_gpu
            row["fits"] = est.states_bytes_per_gpu <= gpu.budget_bytes
            rows.append(row)
    return rows
