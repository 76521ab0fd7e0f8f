"""From a validated job and its model info to the resolved plan ("auto" decided).

zero_stage "auto" = 0 if the stage-0 states fit the budget, else 3 (contracts section 3);
cpu_offload implies 3. When the chosen layout does not fit, the plan still resolves and a
warning names the ways out, each priced in `suggestions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from veri_tui.errors import Refusal, VeriError
from veri_tui.plan.activations import ActivationModel, sequence_length
from veri_tui.plan.calibration import calibration_for
from veri_tui.plan.cost import estimate_cost
from veri_tui.plan.decide import batch_sizes, choose_stage, states_for
from veri_tui.plan.disk import disk_for
from veri_tui.plan.gpus import GPU, get_gpu, gpus_text
from veri_tui.plan.knobs import JobConfig
from veri_tui.plan.memory import MemoryEstimate, gb
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.model_sources import read_model_info
from veri_tui.plan.moe import moe_line
from veri_tui.plan.peak import estimate_peak, peak_parts
from veri_tui.plan.record import PlanRecord, plan_line
from veri_tui.plan.suggest import Suggestion, suggestions_for
from veri_tui.plan.throughput import estimate_throughput, flops_per_token
from veri_tui.plan.validate import NETWORK_GBPS, validate

if TYPE_CHECKING:
    from veri_tui.jobfolder.knobs.fields import Checkpointing

__all__ = ["batch_sizes", "choose_stage", "human_count", "plan_job", "states_for"]


def human_count(n: int) -> str:
    """0.60B, 156.0K: the scale of a parameter count at a glance."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}" if unit == "B" else f"{n / scale:.1f}{unit}"
    return str(n)


class _Shape(TypedDict):
    """The sample shape the activation and throughput estimates share."""

    method: str
    micro_batch_size: int
    max_seq_length: int
    max_length: int


def _header(
    job: JobConfig, info: ModelInfo, gpu: GPU, est: MemoryEstimate, trace: list[str]
) -> list[str]:
    hp = job.hyperparameters
    if hp.lora_rank:
        kind = f"LoRA rank {hp.lora_rank} on {info.lora_target_count} linears"
    else:
        kind = "full fine-tune"
    tied = "; tied embeddings counted once" if info.tied_embeddings else ""
    usable = gpu.memory_bytes / 1e9
    experts = moe_line(info, bool(hp.lora_rank), human_count)
    return [
        f"model: {info.source}: {info.parameter_count:,} parameters "
        f"({human_count(info.parameter_count)}), {est.trainable_parameter_count:,} trainable "
        f"({kind}){tied}",
        *([experts] if experts else []),
        f"budget: {gb(gpu.budget_bytes)}/GPU on {gpu.name} x{job.gpu_count} "
        f"(70% of {usable:.1f} GB after a 2 GiB reserve)",
        *_layout(job),
        f"decision: {trace[-1]}",
    ]


def _layout(job: JobConfig) -> list[str]:
    """`nodes: 2 x 4 GPUs (a, b)` for a multi-node job, nothing for one machine."""
    if job.nodes <= 1:
        return []
    hp = job.hyperparameters
    gbps = network_gbps(job)
    how = "set" if hp.internode_bandwidth_gbps else f"{hp.network} default"
    if hp.network_measured and hp.internode_bandwidth_gbps:
        how = f"measured {hp.network_measured}"
    per_node = job.gpu_count // job.nodes
    gpus = gpus_text(per_node) if per_node else "? GPUs (detected at the preflight)"
    names = f" ({', '.join(job.hosts)})" if job.hosts else ""
    return [
        f"nodes: {job.nodes} x {gpus}{names}"
        f"; NVLink within a node, {gbps:g} Gb/s per node across ({how})"
    ]


def _recompute(mode: Checkpointing, info: ModelInfo, lora_rank: int, seq: int) -> dict[str, Any]:
    """The throughput model's checkpointing arguments: full recomputes the whole forward;
    selective the matmuls its policy does not keep and every elementwise op."""
    args: dict[str, Any] = {"gradient_checkpointing": mode == "full"}
    if mode == "selective" and info.hidden_size:
        fwd = flops_per_token(info, seq, lora=bool(lora_rank), gc=False, dpo=False)["forward"]
        recomputed = ActivationModel.of(info, mode, lora_rank=lora_rank).recompute_flops
        args["recompute_fraction"] = recomputed / fwd if fwd else 0.0
        args["recompute_elementwise"] = 1.0
    return args


def network_gbps(job: JobConfig) -> float:
    """The inter-node bandwidth the plan assumes, Gb/s per node."""
    hp = job.hyperparameters
    return hp.internode_bandwidth_gbps or NETWORK_GBPS.get(hp.network, NETWORK_GBPS["ethernet"])


def throughput_args(job: JobConfig, info: ModelInfo, stage: int) -> dict[str, Any]:
    """`estimate_throughput`'s arguments for ``job`` at ``stage``: the one place that says
    which knobs the throughput depends on, for the plan and the sweep alike (api.py)."""
    hp = job.hyperparameters
    mbs, ga, _ = batch_sizes(job)
    return {
        "method": job.method,
        "gpu_count": job.gpu_count,
        "zero_stage": stage,
        "precision": hp.precision,
        "lora_rank": hp.lora_rank,
        "micro_batch_size": mbs,
        "gradient_accumulation_steps": ga,
        "max_seq_length": hp.max_seq_length,
        "max_length": hp.max_length,
        "cpu_offload": hp.cpu_offload,
        **_recompute(
            hp.checkpointing,
            info,
            hp.lora_rank,
            sequence_length(job.method, hp.max_seq_length, hp.max_length),
        ),
        "nodes": job.nodes,
        "internode_gbps": network_gbps(job),
    }


def _notes(job: JobConfig, info: ModelInfo) -> list[str]:
    hp, out = job.hyperparameters, []
    length_key = "max_length" if job.method == "dpo" else "max_seq_length"
    limit = info.max_position_embeddings
    if limit and getattr(hp, length_key) > limit:
        out.append(
            f"{length_key}={getattr(hp, length_key)} exceeds the model's "
            f"max_position_embeddings ({limit}); estimates assume full-length samples"
        )
    if job.method == "sft_text" and "max_length" in hp.fields_given:
        out.append("max_length applies to dpo; sft_text truncates at max_seq_length")
    if job.method == "dpo" and "max_seq_length" in hp.fields_given:
        out.append("max_seq_length applies to sft_text; dpo truncates at max_length")
    for key in ("use_unsloth", "use_liger"):
        if getattr(hp, key):
            out.append(f"{key} is not supported by the bundled trainer and is ignored")
    return out


def lora_info(job: JobConfig, info: ModelInfo) -> ModelInfo:
    """`info` with the LoRA figures of the job's `lora_target_modules` (the adapter count,
    hence the states); one refusal naming the modules the model has for an unknown one."""
    try:
        return info.with_lora_targets(job.hyperparameters.lora_target_modules)
    except ValueError as exc:
        raise VeriError([Refusal("lora_target_modules", str(exc))]) from None


def plan_job(
    job: JobConfig,
    info: ModelInfo | None = None,
    *,
    count_tokens: bool = True,
    host: str | None = None,
) -> PlanRecord:
    """Validate, read the model (unless given), decide, and return the plan record.

    Activations and throughput are calibrated by the runs measured on this GPU type on
    ``host`` (None: this machine; calibration.py), when there are any.

    The dataset's tokens are counted for the cost (cached by content); with
    `count_tokens=False` only a cached count is used (the app counts in a worker)."""
    errors = validate(job)
    if errors:
        raise VeriError(errors)
    if info is None:
        info = read_model_info(job.model)
    info = lora_info(job, info)
    gpu = get_gpu(job.gpu)
    hp = job.hyperparameters
    mbs, ga, gbs = batch_sizes(job)
    stage, trace = choose_stage(job, info, gpu)
    est = states_for(job, info, stage)
    fits = est.states_bytes_per_gpu <= gpu.budget_bytes
    warnings = _notes(job, info)
    suggestions: list[Suggestion] = []
    if not fits:
        suggestions = suggestions_for(job, info, gpu, stage)
        ways = "; ".join(s.text for s in suggestions) or "a GPU with more memory"
        if suggestions and not suggestions[0].fits:  # those that fit come first
            ways += f"; none of these fits on {gpu.name}: a GPU with more memory"
        warnings.insert(
            0,
            f"model states {gb(est.states_bytes_per_gpu)}/GPU exceed the "
            f"{gb(gpu.budget_bytes)} budget at zero_stage {stage}; the job may run out of "
            f"memory. Ways out: {ways}",
        )
        trace.append(f"does not fit: {gb(est.states_bytes_per_gpu)}/GPU > {gb(gpu.budget_bytes)}")
    if info.tied_note:
        trace.append(info.tied_note)
    rp: dict[str, Any] = {
        "data_parallel_size": job.gpu_count,
        "zero_stage": stage,
        "micro_batch_size": mbs,
        "gradient_accumulation_steps": ga,
        "global_batch_size": gbs,
        "precision": hp.precision,
        "gradient_checkpointing": hp.checkpointing != "none",
        "activation_checkpointing": hp.checkpointing,
        "cpu_offload": hp.cpu_offload,
        "zero_stage_requested": hp.zero_stage,
        "memory_estimate": est.to_dict(),
        "decision_trace": trace,
    }
    common: _Shape = {
        "method": job.method,
        "micro_batch_size": mbs,
        "max_seq_length": hp.max_seq_length,
        "max_length": hp.max_length,
    }
    packing = hp.packing and job.method == "sft_text"  # a dpo pair is one forward of its own
    activations = estimate_peak(info, gpu, est, activation_checkpointing=hp.checkpointing,
                                packing=packing, **common)  # fmt: skip
    calibration, calibration_warnings = calibration_for(gpu.name, host)
    activations = calibration.activations(activations, info)
    evaluating = bool(job.eval_dataset) or hp.eval_fraction > 0
    activations["peak"] = calibration.peak(
        peak_parts(activations, est, gpu, evaluating, accumulating=ga > 1)
    )
    warnings += calibration_warnings
    tp_args = throughput_args(job, info, stage)
    throughput = calibration.throughput(estimate_throughput(info, gpu, **tp_args))

    def throughput_at(length: int) -> dict[str, Any]:
        """The (calibrated) step at a padded sample length: the cost's."""
        at = {**tp_args, "max_seq_length": length, "max_length": length}
        return calibration.throughput(estimate_throughput(info, gpu, **at))

    cost, cost_warnings = estimate_cost(
        job, info.path, gpu, gbs, mbs, throughput_at, count=count_tokens
    )
    warnings += cost_warnings
    if activations["known"] and not activations["fits"]:
        warnings.append(
            f"activations {gb(activations['bytes_per_gpu'])}/GPU at mbs={mbs} do not fit beside "
            f"the states; largest micro_batch_size that fits: {activations['max_micro_batch_size']}"
        )
    disk = disk_for(job, info)
    header = _header(job, info, gpu, est, trace[:1])
    return PlanRecord(
        parameter_count=info.parameter_count,
        active_parameter_count=info.active_parameter_count,
        trainable_parameter_count=est.trainable_parameter_count,
        budget_bytes=gpu.budget_bytes,
        states_bytes_per_gpu=est.states_bytes_per_gpu,
        host_bytes_per_node=est.host_bytes_per_node,
        fits=fits,
        header_lines=header,
        plan_line=plan_line(rp, est.states_bytes_per_gpu),
        warnings=warnings,
        suggestions=suggestions,
        activations=activations,
        throughput=throughput,
        resolved_parallelism=rp,
        job=job.to_dict(mode="json"),
        model=info.to_dict(),
        gpu=gpu.to_dict(),
        disk=disk,
        cost=cost,
    )
