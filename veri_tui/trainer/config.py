"""The job spec as the trainer reads it: job.json (or a bare spec) -> TrainConfig.

The launch side resolved and validated the plan; the trainer never recomputes it. Every knob
of the schema (veri_tui/jobfolder/knobs) is a field of TrainConfig and is read from the spec by its
field type; this module applies what only the trainer decides (the resolved values, the
method's length) and refuses (with ConfigError, code CONFIG_ERROR) what this trainer cannot
run.
"""

from __future__ import annotations

import functools
import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.contract.layout import CHECKPOINTS, OUTPUT
from veri_tui.jobfolder.data.source import Source, sources_of
from veri_tui.jobfolder.knobs import METHODS_TRAINED, PIN_KEYS, Hyperparameters, by_name, table
from veri_tui.jobfolder.knobs.fields import Checkpointing
from veri_tui.jobfolder.knobs.rules import canonical, checkpointing_mode, coerce

#: The schema's knobs by name: the values of each that run (`available`) are its to say.
_KNOBS = by_name(Hyperparameters)


@dataclass
class TrainConfig(Hyperparameters):
    """Everything one rank needs to run the planned job: its knobs (the schema's fields, as
    the plan resolved them) and where its files are."""

    job_dir: Path
    method: str
    model_path: str
    dataset: Path
    output_dir: Path
    device: str = "auto"
    resume_from: Path | None = None
    plan_header: list[str] = field(default_factory=list)
    states_bytes_per_gpu: int | None = None
    canary_steps: int = (
        0  # spec `canary.steps`: measured, then the gate (veri_tui/trainer/canary.py)
    )
    canary_gate_s: float = 600.0  # the longest wait for the gate's answer
    # What the plan resolved where the schema allows "auto" or "not set".
    zero_stage: int = field(default=0, kw_only=True)
    data_parallel_size: int = field(default=1, kw_only=True)
    gradient_accumulation_steps: int = field(default=1, kw_only=True)
    activation_checkpointing: Checkpointing = field(default="full", kw_only=True)
    # --- datasets (issue 27): job.json `spec.datasets` (the mixture, this machine's paths) and
    # `spec.eval_datasets`, else `spec.dataset` alone (veri_tui/jobfolder/data/source.py); the
    # eval knobs (eval_fraction, eval_steps) are the schema's ---
    sources: list[Source] = field(default_factory=list, kw_only=True)
    eval_sources: list[Source] = field(default_factory=list, kw_only=True)

    def __post_init__(self) -> None:
        if not self.sources:  # built from a bare dataset path (tests, benchmarks)
            self.sources = [Source(str(self.dataset))]

    # Not a field of its own: the samples per optimizer step are mbs x grad_acc x dp. A
    # spec's global_batch_size is kept as asked, and `_check` refuses one that differs.
    # A property over the schema's dataclass field: mypy refuses that override ([misc]),
    # which is what this class means (the value is derived, a set one is only recorded).
    @property  # type: ignore[misc]
    def global_batch_size(self) -> int:
        """Samples per optimizer step: mbs x grad_acc x dp."""
        return self.micro_batch_size * self.gradient_accumulation_steps * self.data_parallel_size

    @global_batch_size.setter
    def global_batch_size(self, value: int | None) -> None:
        self.__dict__["requested_global_batch_size"] = value

    @property
    def ckpt_dir(self) -> Path:
        """Where committed DCP checkpoints live."""
        return self.job_dir / CHECKPOINTS


@functools.cache
def _types() -> dict[str, Any]:
    """Each knob's type as TrainConfig holds it (the resolved ones: its own)."""
    hints = typing.get_type_hints(TrainConfig)
    return {k.name: hints[k.name] for k in table(Hyperparameters)}


def load_spec(path: Path) -> dict[str, Any]:
    """Read job.json (its `spec`) or a bare spec file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the job spec ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the job spec must be a JSON object")
    spec = data.get("spec", data)
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: `spec` must be a JSON object")
    return spec


def _resume_from(value: Any) -> Path | None:
    """The spec's `resume_from`: the checkpoint folder (`.../step-N`) the supervisor chose
    and verified for this attempt, or None to start from scratch."""
    if value in (None, ""):
        return None
    path = Path(str(value))
    if not re.fullmatch(r"step-\d+", path.name):
        raise ConfigError(f"resume_from: {value!r} is not a checkpoint folder (step-N)")
    return path


def from_spec(spec: dict[str, Any], job_dir: Path) -> TrainConfig:
    """Build a TrainConfig; raise ConfigError naming the key for anything unusable."""
    method = spec.get("method")
    if method not in METHODS_TRAINED:
        raise ConfigError(
            f"method: {method!r} is not supported by the bundled trainer {METHODS_TRAINED}"
        )
    model = spec.get("model_path") or spec.get("model")
    if not model:
        raise ConfigError("model_path: the job spec names no model")
    if not spec.get("dataset"):
        raise ConfigError("dataset: the job spec names no dataset")
    hp, _ = canonical(spec.get("hyperparameters") or {}, Hyperparameters)
    # The plan's knobs come from resolved_parallelism first: that is the plan the user saw.
    hp.update({k: v for k, v in (spec.get("resolved_parallelism") or {}).items() if k in PIN_KEYS})
    try:
        sources = sources_of(spec.get("datasets") or spec["dataset"])
        eval_sources = sources_of(spec.get("eval_datasets"))
    except ValueError as exc:
        raise ConfigError(f"datasets: {exc}") from None
    cfg = TrainConfig(
        job_dir=Path(job_dir),
        sources=sources,
        eval_sources=eval_sources,
        method=method,
        model_path=str(model),
        dataset=Path(spec["dataset"]),
        output_dir=Path(spec.get("output_dir") or Path(job_dir) / OUTPUT),
        device=str(spec.get("device", "auto")),
        plan_header=list(spec.get("plan_header") or []),
        states_bytes_per_gpu=spec.get("states_bytes_per_gpu"),
        resume_from=_resume_from(spec.get("resume_from")),
    )
    for key, tp in _types().items():
        if hp.get(key) is not None:
            setattr(cfg, key, coerce(key, tp, hp[key]))
    for knob in table(Hyperparameters):  # a feature not available runs at its default only
        if knob.unavailable and getattr(cfg, knob.name) != knob.default:
            raise ConfigError(f"{knob.name}: the bundled trainer runs data parallel only; set "
                              f"it to {knob.default}")  # fmt: skip
    _checkpointing(cfg, hp)
    if method == "sft_text":
        cfg.max_length = cfg.max_seq_length  # the method's length, as the trainer reads it
    canary = spec.get("canary") or {}
    if canary:
        steps = canary.get("steps", 3)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ConfigError("canary.steps: a whole number, 1 or more (launch --canary K)")
        cfg.canary_steps = steps
        cfg.canary_gate_s = float(canary.get("gate_s") or cfg.canary_gate_s)
    _check(cfg)
    return cfg


def _checkpointing(cfg: TrainConfig, hp: dict[str, Any]) -> None:
    """activation_checkpointing, else its alias gradient_checkpointing (on = full)."""
    mode = hp.get("activation_checkpointing")
    if mode is not None and hp.get("gradient_checkpointing") is not None:
        if cfg.gradient_checkpointing != (mode != "none"):
            raise ConfigError(
                f"activation_checkpointing: {mode!r} contradicts gradient_checkpointing="
                f"{str(cfg.gradient_checkpointing).lower()}; drop one of them"
            )
    cfg.activation_checkpointing = checkpointing_mode(mode, cfg.gradient_checkpointing)
    cfg.gradient_checkpointing = cfg.activation_checkpointing != "none"


def _check(cfg: TrainConfig) -> None:
    stages = [s for s in _KNOBS["zero_stage"].available if s != "auto"]  # the plan chose
    if cfg.zero_stage not in stages:
        raise ConfigError(
            f"zero_stage: {cfg.zero_stage} is not one of {', '.join(map(str, stages))}"
        )
    precisions = _KNOBS["precision"].available
    if cfg.precision not in precisions:
        raise ConfigError(f"precision: {cfg.precision!r} is not available; use "
                          f"{' or '.join(precisions)}")  # fmt: skip
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device: {cfg.device!r} is not one of auto, cpu, cuda")
    positive = ("micro_batch_size", "gradient_accumulation_steps", "data_parallel_size")
    for key in (*positive, "logging_steps", "keep_checkpoints", "artifact_shard_bytes"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: must be at least 1")
    if cfg.max_length < 2:
        raise ConfigError("max_seq_length: must be at least 2 tokens")
    gbs = cfg.__dict__.get("requested_global_batch_size")
    if gbs is not None and gbs != cfg.global_batch_size:
        raise ConfigError(
            f"global_batch_size: {gbs} != micro_batch_size x gradient_accumulation_steps x "
            f"data_parallel_size = {cfg.global_batch_size}"
        )
    if cfg.cpu_offload and cfg.zero_stage == 0:
        raise ConfigError("cpu_offload: needs zero_stage 2 or 3 (offload shards FSDP2 states)")
    if not 0 <= cfg.eval_fraction < 1:
        raise ConfigError("eval_fraction: must be at least 0 and below 1")
    if cfg.eval_steps is not None and cfg.eval_steps < 1:
        raise ConfigError("eval_steps: must be 1 or more (or unset)")
    if cfg.max_restarts < 0:
        raise ConfigError("max_restarts: must be 0 (no retries) or more")
    for key in ("hang_timeout_s", "load_timeout_s"):
        value = getattr(cfg, key)
        if value is not None and not value > 0:
            raise ConfigError(f"{key}: must be a number of seconds above 0 (or unset)")
    if cfg.lora_rank < 0:
        raise ConfigError("lora_rank: must be 0 (full fine-tune) or positive")
    if cfg.load_in_4bit and not cfg.lora_rank:
        raise ConfigError(
            "load_in_4bit: QLoRA trains LoRA adapters over the 4-bit base; set lora_rank"
        )
    if cfg.load_in_4bit and cfg.data_parallel_size > 1:
        raise ConfigError("load_in_4bit: single GPU only; set gpu_count 1")
    if cfg.load_in_4bit and (cfg.zero_stage in (2, 3) or cfg.cpu_offload):
        # FSDP2 cannot shard bitsandbytes' packed NF4 weights and their quantization state
        # (a hand-written spec can ask; the planner never resolves it).
        knob = "cpu_offload" if cfg.cpu_offload else f"zero_stage {cfg.zero_stage}"
        raise ConfigError(
            f"load_in_4bit: QLoRA runs on one GPU at zero_stage 0 without cpu_offload, not "
            f"with {knob} (FSDP2 cannot shard an NF4 base); set zero_stage 0 and cpu_offload false"
        )
    modules = cfg.lora_target_modules
    if modules is not None and (
        not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules)
    ):
        raise ConfigError("lora_target_modules: a non-empty list of module names, or unset")
    if cfg.packing and cfg.method != "sft_text":
        raise ConfigError(f"packing: applies to sft_text, not {cfg.method}; drop packing")
    if not 0 <= cfg.lora_dropout < 1:
        raise ConfigError(f"lora_dropout: {cfg.lora_dropout} is not in [0, 1)")
    if cfg.lora_alpha is None and cfg.lora_rank:
        cfg.lora_alpha = 2.0 * cfg.lora_rank
