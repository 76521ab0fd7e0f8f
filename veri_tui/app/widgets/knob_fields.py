"""The fields of the plan editor: every job field and knob of contracts section 1.

Presentation only: which widget edits a key, its label and a one-line hint. The meaning and
the checks of each key live in `veri_tui.plan` (`job_from_fields` / `validate`); an empty
input means "not set", so the core applies its own default.
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("sft_text", "dpo", "grpo", "grpo_harness", "sft_video_gen")


@dataclass(frozen=True)
class FieldSpec:
    """One editable key: `kind` is "input", "select" or "switch"."""

    key: str
    label: str
    kind: str = "input"
    hint: str = ""
    options: tuple[str, ...] = ()
    default: bool | str | None = None
    methods: tuple[str, ...] = ()  # shown only for these methods (empty: always)
    section: str = ""


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("method", "method", "select", "sft_text or dpo", METHODS, "sft_text", (), "Job"),
    FieldSpec("gpu", "GPU type", "select", "GPU model per process", (), None),
    FieldSpec("gpu_count", "gpu_count", hint="processes (GPUs) per job"),
    FieldSpec(
        "data_parallel_size",
        "data_parallel_size",
        hint="must equal gpu_count",
        section="Parallelism",
    ),
    FieldSpec(
        "zero_stage",
        "zero_stage",
        "select",
        "auto, 0 (DDP), 2 or 3 (FSDP2)",
        ("auto", "0", "1", "2", "3"),
        "auto",
    ),
    FieldSpec("micro_batch_size", "micro_batch_size", hint="samples per GPU per step (1)"),
    FieldSpec("gradient_accumulation_steps", "grad_accumulation", hint="micro-steps per step"),
    FieldSpec("global_batch_size", "global_batch_size", hint="mbs x grad_acc x gpu_count"),
    FieldSpec(
        "precision",
        "precision",
        "select",
        "bf16, or fp32 master weights",
        ("bf16", "fp32", "fp16", "fp8"),
        "bf16",
    ),
    FieldSpec("gradient_checkpointing", "grad checkpointing", "switch", "recompute", (), True),
    FieldSpec("cpu_offload", "cpu_offload", "switch", "states in host memory", (), False),
    FieldSpec("lora_rank", "lora_rank", hint="0 = full fine-tune", section="LoRA and lengths"),
    FieldSpec("lora_alpha", "lora_alpha", hint="LoRA scaling"),
    FieldSpec("max_seq_length", "max_seq_length", hint="tokens per sample", methods=("sft_text",)),
    FieldSpec("max_length", "max_length", hint="tokens per pair", methods=("dpo",)),
    FieldSpec("learning_rate", "learning_rate", hint="e.g. 1e-4", section="Training"),
    FieldSpec("max_steps", "max_steps", hint="optimizer steps"),
    FieldSpec("num_epochs", "num_epochs", hint="passes over the data"),
    FieldSpec("warmup_steps", "warmup_steps"),
    FieldSpec("seed", "seed"),
    FieldSpec("beta", "beta", hint="DPO temperature", methods=("dpo",)),
    FieldSpec("checkpoint_steps", "checkpoint_steps", hint="save every N steps"),
    FieldSpec("tensor_parallel_size", "tensor_parallel", hint="only 1", section="Not available"),
    FieldSpec("context_parallel_size", "context_parallel", hint="only 1"),
    FieldSpec("pipeline_parallel_size", "pipeline_parallel", hint="only 1"),
    FieldSpec("expert_parallel_size", "expert_parallel", hint="only 1"),
    FieldSpec(
        "use_unsloth", "use_unsloth", "switch", "1 GPU only", (), False, (), "Single-GPU only"
    ),
    FieldSpec("load_in_4bit", "load_in_4bit", "switch", "QLoRA, 1 GPU only", (), False),
    FieldSpec("use_liger", "use_liger", "switch", "1 GPU only", (), False),
)

FIELD_KEYS = frozenset(f.key for f in FIELDS)
