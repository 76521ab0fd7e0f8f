"""Ways out when the model states do not fit: each one priced with the same memory model.

Offered in this order: zero_stage 3 (when not already sharding), lora_rank 16 (full
fine-tunes), cpu_offload (with the host memory it needs), the smallest gpu_count that fits,
and bf16 (when fp32 was asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veri_tui.plan.gpus import GPU
from veri_tui.plan.memory import BYTES_PER_PARAM, FROZEN_BYTES, estimate_states, gb
from veri_tui.plan.model_info import ModelInfo

if TYPE_CHECKING:
    from veri_tui.plan.knobs import JobConfig

SUGGESTED_LORA_RANK = 16
MAX_SUGGESTED_GPUS = 4096


def _entry(set_: dict[str, Any], states: int, budget: int, extra: str = "") -> dict[str, Any]:
    knobs = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in set_.items())
    verdict = "fits" if states <= budget else "still over"
    return {
        "set": set_,
        "states_bytes_per_gpu": states,
        "fits": states <= budget,
        "text": f"{knobs} {verdict}: {gb(states)}/GPU{extra}",
    }


def min_gpu_count(job: JobConfig, info: ModelInfo, gpu: GPU) -> int | None:
    """Smallest gpu_count whose zero_stage-3 states fit, or None (e.g. a DPO reference alone
    over budget)."""
    hp = job.hyperparameters
    n = info.parameter_count
    b = BYTES_PER_PARAM[hp.precision]
    if hp.lora_rank:
        sharded = FROZEN_BYTES * n + b * info.adapter_parameters(hp.lora_rank)
        whole = 0
    else:
        dpo = job.method == "dpo"
        # A DPO reference is whole on every GPU, and its shard is resident too (memory.py).
        sharded = b * n + (FROZEN_BYTES * n if dpo else 0)
        whole = FROZEN_BYTES * n if dpo else 0
    room = gpu.budget_bytes - whole
    if room <= 0:
        return None
    k = max(2, -(-sharded // room))
    return k if k <= MAX_SUGGESTED_GPUS else None


def suggestions_for(job: JobConfig, info: ModelInfo, gpu: GPU, stage: int) -> list[dict[str, Any]]:
    """Priced alternatives for a plan whose states exceed the budget."""
    hp = job.hyperparameters
    budget = gpu.budget_bytes
    dp = job.gpu_count
    dpo = job.method == "dpo"
    base = {"precision": hp.precision, "dp": dp, "lora_rank": hp.lora_rank, "dpo": dpo}
    out: list[dict[str, Any]] = []

    def states(**kw: Any) -> int:
        args = {**base, **kw}
        return estimate_states(
            info,
            precision=args["precision"],
            zero_stage=args["zero_stage"],
            dp=args["dp"],
            lora_rank=args["lora_rank"],
            dpo=dpo,
            cpu_offload=args.get("cpu_offload", False),
        ).states_bytes_per_gpu

    sharded = 3 if dp > 1 else 0
    if dp > 1 and stage != 3 and not hp.cpu_offload:
        out.append(_entry({"zero_stage": 3}, states(zero_stage=3), budget))
    if hp.lora_rank == 0:
        r = SUGGESTED_LORA_RANK
        s0 = states(zero_stage=0, lora_rank=r)
        s = s0 if s0 <= budget or dp == 1 else states(zero_stage=sharded, lora_rank=r)
        out.append(_entry({"lora_rank": r}, s, budget))
    if dp > 1 and not hp.cpu_offload:
        est = estimate_states(
            info,
            precision=hp.precision,
            zero_stage=3,
            dp=dp,
            lora_rank=hp.lora_rank,
            dpo=dpo,
            cpu_offload=True,
            gpus_per_node=8,
        )
        host = f", {gb(est.host_bytes_per_node)} host memory per node"
        out.append(_entry({"cpu_offload": True}, est.states_bytes_per_gpu, budget, host))
    k = min_gpu_count(job, info, gpu)
    # Per-part rounding can put the closed form one byte over: step up until it fits.
    while k is not None and k < MAX_SUGGESTED_GPUS and states(zero_stage=3, dp=k) > budget:
        k += 1
    if k is not None and k > dp:
        out.append(_entry({"gpu_count": k}, states(zero_stage=3, dp=k), budget))
    if hp.precision == "fp32":
        s0 = states(zero_stage=0, precision="bf16")
        s = s0 if s0 <= budget or dp == 1 else states(zero_stage=3, precision="bf16")
        out.append(_entry({"precision": "bf16"}, s, budget))
    return out
