"""Ways out when the model states do not fit, each one priced as the plan of the changed job.

An option is a set of knob changes. Its price is what `plan_job` decides for the job with
those changes: the same stage choice (`decide.choose_stage`) and the same states function
(`decide.states_for`). No formula lives here, so an option and the plan it leads to agree
to the byte (tests/plan/test_suggest.py applies each one and plans it).

Offered in this order, those that fit first: zero_stage 3 (when not already sharding),
lora_rank 16 (full fine-tunes; when LoRA alone is still over, also LoRA over a 4-bit base on
one GPU and LoRA with the smallest gpu_count that fits it), load_in_4bit (a LoRA job on one
GPU), cpu_offload (with the host memory it needs), the smallest gpu_count that fits, and
bf16 (when fp32 was asked for). So `ctrl+y` (apply the first) never applies one that is
still over while another fits. An option carries the extra keys that applying it needs to
be accepted and to shard (zero_stage 3 beside cpu_offload when stage 0 or 2 was requested;
data_parallel_size beside gpu_count when it was set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from veri_tui.plan.decide import choose_stage, states_for
from veri_tui.plan.memory import gb

if TYPE_CHECKING:
    from veri_tui.plan.gpus import GPU
    from veri_tui.plan.knobs import JobConfig
    from veri_tui.plan.model_info import ModelInfo

SUGGESTED_LORA_RANK = 16
MAX_SUGGESTED_GPUS = 4096


class Suggestion(NamedTuple):
    """One way out: the knobs to set and what the plan of the job with them says."""

    set: dict[str, Any]
    states_bytes_per_gpu: int
    host_bytes_per_node: int
    fits: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an entry of the plan's `suggestions`)."""
        d = self._asdict()
        d["set"] = dict(self.set)
        return d


def ways_out_title(suggestions: list[Suggestion]) -> str:
    """The title above the suggestions (the app's and the notebook's): those that fit come
    first, so a first one still over means none fits on this GPU type; it says so plainly."""
    if suggestions and not suggestions[0].fits:
        return "Nothing fits on this GPU type, not even with one of these"
    return "Does not fit. Ways out"


def variant(job: JobConfig, change: dict[str, Any]) -> JobConfig:
    """`job` with the knobs of `change` set (gpu_count is the job's, the rest hyperparameters)."""
    knobs = {k: v for k, v in change.items() if k != "gpu_count"}
    update: dict[str, Any] = {"hyperparameters": job.hyperparameters.copy_with(update=knobs)}
    if "gpu_count" in change:
        update["gpu_count"] = change["gpu_count"]
    return job.copy_with(update=update)


def _shown(value: Any) -> str:
    """A knob's value as the config spells it (booleans lowercase)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def price(job: JobConfig, info: ModelInfo, gpu: GPU, change: dict[str, Any]) -> Suggestion:
    """The option `change`, priced by planning the changed job's stage and states."""
    changed = variant(job, change)
    stage, _ = choose_stage(changed, info, gpu)
    est = states_for(changed, info, stage)
    fits = est.states_bytes_per_gpu <= gpu.budget_bytes
    knobs = " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items()
    )
    host = est.host_bytes_per_node
    extra = f", {gb(host)} host memory per node" if host else ""
    text = f"{knobs} {'fits' if fits else 'still over'}: {gb(est.states_bytes_per_gpu)}/GPU{extra}"
    return Suggestion(dict(change), est.states_bytes_per_gpu, host, fits, text)


def _sharding(job: JobConfig) -> dict[str, Any]:
    """zero_stage 3 when the job pins a stage that would not shard (0 or 2), else nothing."""
    return {} if job.hyperparameters.zero_stage in ("auto", 3) else {"zero_stage": 3}


def min_gpu_count(job: JobConfig, info: ModelInfo, gpu: GPU) -> Suggestion | None:
    """The gpu_count option: the smallest count (2 or more) at which the job, sharded, fits;
    None when no count up to MAX_SUGGESTED_GPUS does (e.g. a DPO reference, whole on every
    GPU, alone over the budget). States never grow with the count, so a bisection finds it."""
    extra = _sharding(job)

    def at(k: int) -> Suggestion:
        change: dict[str, Any] = {"gpu_count": k, **extra}
        if job.hyperparameters.data_parallel_size is not None:
            change["data_parallel_size"] = k  # it must equal gpu_count
        return price(job, info, gpu, change)

    best = at(MAX_SUGGESTED_GPUS)
    if not best.fits:
        return None
    lo, hi = 2, MAX_SUGGESTED_GPUS  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if at(mid).fits:
            hi = mid
        else:
            lo = mid + 1
    return at(lo)


def suggestions_for(job: JobConfig, info: ModelInfo, gpu: GPU, stage: int) -> list[Suggestion]:
    """Priced alternatives for a plan (at `stage`) whose states exceed the budget."""
    hp = job.hyperparameters
    dp = job.gpu_count
    out: list[Suggestion] = []
    if dp > 1 and stage != 3 and not hp.cpu_offload:
        out.append(price(job, info, gpu, {"zero_stage": 3}))
    if hp.lora_rank == 0:
        lora = price(job, info, gpu, {"lora_rank": SUGGESTED_LORA_RANK})
        out.append(lora)
        if not lora.fits:
            out += _with_lora(job, info, gpu, lora.set)
    elif dp == 1 and not hp.load_in_4bit:
        out.append(price(job, info, gpu, {"load_in_4bit": True}))
    if dp > 1 and not hp.cpu_offload:
        out.append(price(job, info, gpu, {"cpu_offload": True, **_sharding(job)}))
    more = min_gpu_count(job, info, gpu)
    if more is not None and more.set["gpu_count"] > dp:
        out.append(more)
    if hp.precision == "fp32":
        out.append(price(job, info, gpu, {"precision": "bf16"}))
    return sorted(out, key=lambda s: not s.fits)  # those that fit first, else in this order


def _with_lora(job: JobConfig, info: ModelInfo, gpu: GPU, lora: dict[str, Any]) -> list[Suggestion]:
    """LoRA alone still over: LoRA over a 4-bit base on one GPU (QLoRA), and LoRA with the
    smallest gpu_count at which it fits (when that is fewer GPUs than the full fine-tune's)."""
    out = []
    if job.gpu_count == 1:
        out.append(price(job, info, gpu, {**lora, "load_in_4bit": True}))
    more = min_gpu_count(variant(job, lora), info, gpu)
    if more is not None:
        full = min_gpu_count(job, info, gpu)
        if full is None or more.set["gpu_count"] < full.set["gpu_count"]:
            # At the job's own count only the sharding keys are new: name only those.
            same = more.set["gpu_count"] == job.gpu_count
            keys = {k: v for k, v in more.set.items() if not (same and v == job.gpu_count)}
            out.append(price(job, info, gpu, {**lora, **keys}))
    return out
