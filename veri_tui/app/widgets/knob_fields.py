"""The fields of the plan editor: every job field and knob of contracts section 1.

Presentation only: which widget edits a key, its label, its unit. The meaning of each key
lives in `veri_tui.plan.knobs`: its default and its description (the full help shown when
the field has focus) are read from there, so the form never disagrees with the core. The
checks live in `job_from_fields` / `validate`; an empty input means "not set", so the core
applies its own default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veri_tui.plan.knobs import METHODS, Hyperparameters, JobConfig


def _knob(key: str) -> Any:
    """The pydantic field of `key`: a job field, else a hyperparameter."""
    return JobConfig.model_fields.get(key) or Hyperparameters.model_fields[key]


@dataclass(frozen=True)
class FieldSpec:
    """One editable key: `kind` is "input", "select" or "switch".

    An input's placeholder is a short hint that fits the field: `hint` when given (keys whose
    default says nothing by itself, e.g. None = "auto"), else the default with its `unit`."""

    key: str
    label: str
    kind: str = "input"
    hint: str = ""
    unit: str = ""
    options: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()  # shown only for these methods (empty: always)
    section: str = ""

    @property
    def default(self) -> Any:
        """The core's default for this key (what an unset key means)."""
        return _knob(self.key).default

    @property
    def help(self) -> str:
        """The key's full description, as the core documents it."""
        return _knob(self.key).description or ""

    @property
    def placeholder(self) -> str:
        """The short hint an empty input shows: `auto`, `default 1`, `2048 tokens`."""
        if self.hint:
            return self.hint
        return f"{self.default} {self.unit}" if self.unit else f"default {self.default}"


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("method", "method", "select", options=METHODS, section="Job"),
    FieldSpec("gpu", "GPU type", "select"),  # options: the GPU catalog, given by the form
    FieldSpec("gpu_count", "gpu_count"),
    FieldSpec("dataset", "dataset", hint="JSONL file"),
    FieldSpec(
        "data_parallel_size", "data_parallel_size", hint="= gpu_count", section="Parallelism"
    ),
    FieldSpec("zero_stage", "zero_stage", "select", options=("auto", "0", "1", "2", "3")),
    FieldSpec("micro_batch_size", "micro_batch_size"),
    FieldSpec("gradient_accumulation_steps", "grad_accumulation", hint="auto"),
    FieldSpec("global_batch_size", "global_batch_size", hint="auto"),
    FieldSpec("precision", "precision", "select", options=("bf16", "fp32", "fp16", "fp8")),
    FieldSpec("gradient_checkpointing", "grad checkpointing", "switch"),
    FieldSpec("activation_checkpointing", "checkpointing", hint="from switch"),
    FieldSpec("cpu_offload", "cpu_offload", "switch"),
    FieldSpec("lora_rank", "lora_rank", section="LoRA and lengths"),
    FieldSpec("lora_alpha", "lora_alpha", hint="2 x lora_rank"),
    FieldSpec("max_seq_length", "max_seq_length", unit="tokens", methods=("sft_text",)),
    FieldSpec("max_length", "max_length", unit="tokens", methods=("dpo",)),
    FieldSpec("learning_rate", "learning_rate", section="Training"),
    FieldSpec("max_steps", "max_steps", hint="from num_epochs"),
    FieldSpec("num_epochs", "num_epochs"),
    FieldSpec("warmup_steps", "warmup_steps", unit="steps"),
    FieldSpec("seed", "seed"),
    FieldSpec("beta", "beta", methods=("dpo",)),
    FieldSpec("checkpoint_steps", "checkpoint_steps", hint="off"),
    FieldSpec("price_per_gpu_hour", "$/GPU-hour", hint="list price"),
    FieldSpec("tensor_parallel_size", "tensor_parallel", hint="only 1", section="Not available"),
    FieldSpec("context_parallel_size", "context_parallel", hint="only 1"),
    FieldSpec("pipeline_parallel_size", "pipeline_parallel", hint="only 1"),
    FieldSpec("expert_parallel_size", "expert_parallel", hint="only 1"),
    FieldSpec("use_unsloth", "use_unsloth", "switch", section="Single-GPU only"),
    FieldSpec("load_in_4bit", "load_in_4bit", "switch"),
    FieldSpec("use_liger", "use_liger", "switch"),
)
