"""The decision of a plan: the batch sizes, the states per GPU at a stage, the stage chosen.

resolve.py builds the plan record from these; suggest.py prices its options with the same
functions, so an option and the plan it leads to agree (and neither imports the other).
"""

from __future__ import annotations

from veri_tui.plan.gpus import GPU
from veri_tui.plan.knobs import JobConfig
from veri_tui.plan.memory import MemoryEstimate, estimate_states, gb
from veri_tui.plan.model_info import ModelInfo


def batch_sizes(job: JobConfig) -> tuple[int, int, int]:
    """(mbs, grad_acc, gbs) with the contract's defaults filled in (inputs validated)."""
    hp = job.hyperparameters
    n = max(job.gpu_count, 1)
    mbs, ga, gbs = hp.micro_batch_size, hp.gradient_accumulation_steps, hp.global_batch_size
    if ga is None:
        ga = gbs // (mbs * n) if gbs is not None else 1
    return mbs, ga, mbs * ga * n


def states_for(job: JobConfig, info: ModelInfo, zero_stage: int) -> MemoryEstimate:
    """The memory model for this job at a given stage (suggest.py prices its options with it).

    Host memory per node counts every rank of the job: the launcher runs them all on one
    host (torchrun --standalone --nproc-per-node gpu_count, launch/spec.py)."""
    hp = job.hyperparameters
    return estimate_states(
        info,
        precision=hp.precision,
        zero_stage=zero_stage,
        dp=job.gpu_count,
        lora_rank=hp.lora_rank,
        dpo=job.method == "dpo",
        load_in_4bit=hp.load_in_4bit,
        cpu_offload=hp.cpu_offload and zero_stage == 3,
        gpus_per_node=job.gpu_count // job.nodes or None,  # host memory is per node
    )


def choose_stage(job: JobConfig, info: ModelInfo, gpu: GPU) -> tuple[int, list[str]]:
    """The zero stage this job runs with, and why (the decision trace)."""
    hp = job.hyperparameters
    budget = gpu.budget_bytes
    if hp.zero_stage != "auto":
        return int(hp.zero_stage), [f"zero_stage {hp.zero_stage} requested"]
    if hp.cpu_offload:
        return 3, ["cpu_offload keeps sharded states in host memory: zero_stage 3"]
    s0 = states_for(job, info, 0).states_bytes_per_gpu
    if s0 <= budget:
        return 0, [f"stage-0 states {gb(s0)}/GPU fit the {gb(budget)} budget: data parallel"]
    if job.gpu_count == 1:
        return 0, [f"stage-0 states {gb(s0)} exceed the {gb(budget)} budget; one GPU cannot shard"]
    s3 = states_for(job, info, 3).states_bytes_per_gpu
    return 3, [
        f"stage-0 states {gb(s0)}/GPU exceed the {gb(budget)} budget: "
        f"shard with zero_stage 3 ({gb(s3)}/GPU over {job.gpu_count} GPUs)"
    ]
