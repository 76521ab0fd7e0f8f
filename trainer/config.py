"""The job spec as the trainer reads it: job.json (or a bare spec) -> TrainConfig.

The launch side resolved and validated the plan; the trainer never recomputes it. This
module only reads the keys it needs, applies the training defaults, and refuses (with
ConfigError, code CONFIG_ERROR) what this trainer cannot run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobfolder.errors import ConfigError
from jobfolder.layout import CHECKPOINTS, OUTPUT
from jobfolder.record import PIN_KEYS

METHODS = ("sft_text", "dpo")
CHECKPOINTING = ("none", "selective", "full")  # as trainer/checkpointing.py MODES


@dataclass
class TrainConfig:
    """Everything one rank needs to run the planned job."""

    job_dir: Path
    method: str
    model_path: str
    dataset: Path
    output_dir: Path
    device: str = "auto"
    zero_stage: int = 0
    data_parallel_size: int = 1
    micro_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    precision: str = "bf16"
    gradient_checkpointing: bool = True
    activation_checkpointing: str = "full"  # none | selective | full (trainer/checkpointing.py)
    cpu_offload: bool = False
    load_in_4bit: bool = False  # QLoRA: NF4 base (bitsandbytes, one CUDA GPU)
    lora_rank: int = 0
    lora_alpha: float | None = None
    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    num_epochs: int = 1
    max_steps: int = 0
    seed: int = 42
    beta: float = 0.1
    max_length: int = 1024
    checkpoint_steps: int = 0
    logging_steps: int = 1
    keep_checkpoints: int = 2
    artifact_shard_bytes: int = 5 * 10**9  # save_pretrained's default max_shard_size
    resume: bool = False
    hang_timeout_s: float | None = None  # the supervisor's watchdog reads it; checked here
    resume_from: Path | None = None
    max_restarts: int = 0
    plan_header: list[str] = field(default_factory=list)
    states_bytes_per_gpu: int | None = None
    canary_steps: int = 0  # spec `canary.steps`: measured, then the gate (trainer/canary.py)
    canary_gate_s: float = 600.0  # the longest wait for the gate's answer

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer step: mbs x grad_acc x dp."""
        return self.micro_batch_size * self.gradient_accumulation_steps * self.data_parallel_size

    @property
    def ckpt_dir(self) -> Path:
        """Where committed DCP checkpoints live."""
        return self.job_dir / CHECKPOINTS


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("on", "true", "1", "yes", "off", "false", "0"):
        return value.lower() in ("on", "true", "1", "yes")
    if isinstance(value, int):
        return bool(value)
    raise ConfigError(f"{key}: expected true/false, got {value!r}")


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    try:
        out = int(value)
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if float(value) != out:
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    return out


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
    if method not in METHODS:
        raise ConfigError(f"method: {method!r} is not supported by the bundled trainer {METHODS}")
    model = spec.get("model_path") or spec.get("model")
    if not model:
        raise ConfigError("model_path: the job spec names no model")
    if not spec.get("dataset"):
        raise ConfigError("dataset: the job spec names no dataset")
    hp = dict(spec.get("hyperparameters") or {})
    if "batch_size" in hp and "micro_batch_size" not in hp:
        hp["micro_batch_size"] = hp["batch_size"]
    # The plan's knobs come from resolved_parallelism first: that is the plan the user saw.
    hp.update({k: v for k, v in (spec.get("resolved_parallelism") or {}).items() if k in PIN_KEYS})
    for key in ("tensor_parallel_size", "context_parallel_size", "pipeline_parallel_size"):
        if _as_int(key, hp.get(key, 1)) != 1:
            raise ConfigError(f"{key}: the bundled trainer runs data parallel only; set it to 1")
    cfg = TrainConfig(
        job_dir=Path(job_dir),
        method=method,
        model_path=str(model),
        dataset=Path(spec["dataset"]),
        output_dir=Path(spec.get("output_dir") or Path(job_dir) / OUTPUT),
        device=str(spec.get("device", "auto")),
        plan_header=list(spec.get("plan_header") or []),
        states_bytes_per_gpu=spec.get("states_bytes_per_gpu"),
        resume_from=_resume_from(spec.get("resume_from")),
    )
    ints = ("zero_stage", "data_parallel_size", "micro_batch_size", "gradient_accumulation_steps")
    ints += ("lora_rank", "warmup_steps", "num_epochs", "max_steps", "seed", "checkpoint_steps")
    ints += ("artifact_shard_bytes",)
    for key in (*ints, "keep_checkpoints", "logging_steps", "max_restarts"):
        if hp.get(key) is not None:
            setattr(cfg, key, _as_int(key, hp[key]))
    floats = ("learning_rate", "weight_decay", "max_grad_norm", "beta", "lora_alpha")
    for key in (*floats, "hang_timeout_s"):
        if hp.get(key) is not None:
            setattr(cfg, key, float(hp[key]))
    for key in ("gradient_checkpointing", "cpu_offload", "resume", "load_in_4bit"):
        if hp.get(key) is not None:
            setattr(cfg, key, _as_bool(key, hp[key]))
    cfg.activation_checkpointing = _checkpointing(hp, cfg.gradient_checkpointing)
    cfg.gradient_checkpointing = cfg.activation_checkpointing != "none"
    length_key = "max_seq_length" if method == "sft_text" else "max_length"
    if hp.get(length_key) is not None:
        cfg.max_length = _as_int(length_key, hp[length_key])
    cfg.precision = str(hp.get("precision", cfg.precision))
    canary = spec.get("canary") or {}
    if canary:
        cfg.canary_steps = _as_int("canary.steps", canary.get("steps", 3))
        cfg.canary_gate_s = float(canary.get("gate_s") or cfg.canary_gate_s)
        if cfg.canary_steps < 1:
            raise ConfigError("canary.steps: must be 1 or more (veri-tui launch --canary K)")
    _check(cfg, hp)
    return cfg


def _checkpointing(hp: dict[str, Any], gradient_checkpointing: bool) -> str:
    """activation_checkpointing, else its alias gradient_checkpointing (on = full)."""
    mode = hp.get("activation_checkpointing")
    if mode is None:
        return "full" if gradient_checkpointing else "none"
    if mode not in CHECKPOINTING:
        raise ConfigError(
            f"activation_checkpointing: {mode!r} is not one of {', '.join(CHECKPOINTING)}"
        )
    if hp.get("gradient_checkpointing") is not None and gradient_checkpointing != (mode != "none"):
        raise ConfigError(
            f"activation_checkpointing: {mode!r} contradicts gradient_checkpointing="
            f"{str(gradient_checkpointing).lower()}; drop one of them"
        )
    return str(mode)


def _check(cfg: TrainConfig, hp: dict[str, Any]) -> None:
    if cfg.zero_stage not in (0, 2, 3):
        raise ConfigError(f"zero_stage: {cfg.zero_stage} is not one of 0, 2, 3")
    if cfg.precision not in ("bf16", "fp32"):
        raise ConfigError(f"precision: {cfg.precision!r} is not available; use bf16 or fp32")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"device: {cfg.device!r} is not one of auto, cpu, cuda")
    positive = ("micro_batch_size", "gradient_accumulation_steps", "data_parallel_size")
    for key in (*positive, "logging_steps", "keep_checkpoints", "artifact_shard_bytes"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"{key}: must be at least 1")
    if cfg.max_length < 2:
        raise ConfigError("max_seq_length: must be at least 2 tokens")
    gbs = hp.get("global_batch_size")
    if gbs is not None and _as_int("global_batch_size", gbs) != cfg.global_batch_size:
        raise ConfigError(
            f"global_batch_size: {gbs} != micro_batch_size x gradient_accumulation_steps x "
            f"data_parallel_size = {cfg.global_batch_size}"
        )
    if cfg.cpu_offload and cfg.zero_stage == 0:
        raise ConfigError("cpu_offload: needs zero_stage 2 or 3 (offload shards FSDP2 states)")
    if cfg.max_restarts < 0:
        raise ConfigError("max_restarts: must be 0 (no retries) or more")
    if cfg.hang_timeout_s is not None and not cfg.hang_timeout_s > 0:
        raise ConfigError("hang_timeout_s: must be a number of seconds above 0 (or unset)")
    if cfg.lora_rank < 0:
        raise ConfigError("lora_rank: must be 0 (full fine-tune) or positive")
    if cfg.load_in_4bit and not cfg.lora_rank:
        raise ConfigError(
            "load_in_4bit: QLoRA trains LoRA adapters over the 4-bit base; set lora_rank"
        )
    if cfg.load_in_4bit and cfg.data_parallel_size > 1:
        raise ConfigError("load_in_4bit: single GPU only; set gpu_count 1")
    if cfg.lora_alpha is None and cfg.lora_rank:
        cfg.lora_alpha = 2.0 * cfg.lora_rank
