"""The job and its hyperparameters as pydantic models (contracts section 1).

Every knob carries a description: the app shows it beside its field and `veri-tui plan`
names it in errors. Types are checked here; combinations are checked in `validate.py`, so
that all refusals of a config are reported together.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

METHODS_TRAINED = ("sft_text", "dpo")
# Known to the managed service, planned for nothing here (contracts section 1).
METHODS_OTHER = ("grpo", "grpo_harness", "sft_video_gen")
METHODS = METHODS_TRAINED + METHODS_OTHER
DEFAULT_GPU = "L4-24GB"


class Hyperparameters(BaseModel):
    """Every knob of a job: the multi-GPU ones of the seed and the trainer's training keys."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=False)

    # --- multi-GPU knobs (Ultra-Scale Playbook vocabulary) ---
    data_parallel_size: int | None = Field(
        None, description="DP degree; must equal gpu_count (leave unset to follow it)"
    )
    zero_stage: Literal["auto"] | int = Field(
        "auto",
        description='"auto" (0 if the states fit one GPU, else 3), 0 = DDP, 2 or 3 = FSDP2; '
        "1 is not available (use 2)",
    )
    micro_batch_size: int = Field(
        1,
        ge=1,
        alias="batch_size",
        description="samples per GPU per forward/backward (alias: batch_size)",
    )
    gradient_accumulation_steps: int | None = Field(
        None, ge=1, description="micro-batches per optimizer step (default: from gbs, else 1)"
    )
    global_batch_size: int | None = Field(
        None, ge=1, description="samples per optimizer step = mbs x grad_acc x gpu_count"
    )
    precision: str = Field(
        "bf16",
        description='"bf16" (default: bf16 weights and moments, stochastically rounded AdamW) '
        'or "fp32" (fp32 master weights, bf16 compute); LoRA adapters are fp32 in both',
    )
    gradient_checkpointing: bool = Field(
        True, description="recompute activations in backward (on: full, off: none)"
    )
    activation_checkpointing: Literal["none", "selective", "full"] | None = Field(
        None,
        description='"none", "selective" (keep attention and every other matmul output) or '
        '"full" (default: from gradient_checkpointing)',
    )
    cpu_offload: bool = Field(
        False, description="keep weights, grads and optimizer states in host memory (ZeRO-3)"
    )
    lora_rank: int = Field(0, ge=0, description="LoRA rank; 0 = full fine-tune")
    lora_alpha: float | None = Field(None, gt=0, description="LoRA alpha (default 2 x lora_rank)")
    tensor_parallel_size: int = Field(1, description="only 1 (TP is not available)")
    context_parallel_size: int = Field(1, description="only 1 (CP is not available)")
    pipeline_parallel_size: int = Field(1, description="only 1 (PP is not available)")
    expert_parallel_size: int = Field(1, description="only 1 (EP is not available)")
    use_unsloth: bool = Field(False, description="Unsloth kernels (single GPU only)")
    load_in_4bit: bool = Field(
        False, description="QLoRA: NF4 base under the LoRA adapters (one CUDA GPU, lora_rank > 0)"
    )
    use_liger: bool = Field(False, description="Liger kernels (single GPU only)")
    # --- planning only (the cost line; the trainer ignores it) ---
    price_per_gpu_hour: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="USD per GPU-hour for the cost line (default: $VERI_HOME/prices.toml, "
        "else the GPU type's list price)",
    )

    # --- training keys (read by the bundled trainer) ---
    learning_rate: float = Field(1e-4, gt=0, description="peak AdamW learning rate")
    num_epochs: int = Field(1, ge=1, description="passes over the dataset (unless max_steps)")
    max_steps: int | None = Field(
        None, ge=1, description="optimizer steps to run; overrides num_epochs"
    )
    warmup_steps: int = Field(0, ge=0, description="linear warmup, in optimizer steps")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, ge=0, description="gradient clipping norm (0 = off)")
    seed: int = Field(42, description="seed for init, shuffling and dropout")
    beta: float = Field(0.1, gt=0, description="DPO temperature (dpo only)")
    max_seq_length: int = Field(
        2048, ge=8, description="tokens per sample, longer ones truncated (sft_text)"
    )
    max_length: int = Field(
        1024, ge=8, description="tokens per prompt+response, each of chosen/rejected (dpo)"
    )
    checkpoint_steps: int | None = Field(
        None, ge=1, description="save a resumable checkpoint every N optimizer steps"
    )
    keep_checkpoints: int = Field(2, ge=1, description="complete checkpoints kept (newest)")
    resume: bool = Field(
        False, description="continue from the newest complete checkpoint of this job"
    )
    logging_steps: int = Field(1, ge=1, description="write a metric line every N steps")
    artifact_shard_bytes: int = Field(
        5_000_000_000,
        ge=1,
        description="largest safetensors file of a full fine-tune's artifact, in bytes "
        "(default 5 GB, as save_pretrained)",
    )
    hang_timeout_s: float | None = Field(
        None,
        gt=0,
        description="seconds without progress on any rank before the job fails RANK_HUNG "
        "(default: 300 or 10 x the slowest step, x4 while loading or saving)",
    )
    # --- planning only, multi-node jobs (the trainer ignores them) ---
    network: str = Field(
        "ethernet",
        description="the link between nodes: ethernet (default 25 Gb/s per node) or "
        "infiniband (default 400 Gb/s per node)",
    )
    internode_bandwidth_gbps: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Gb/s per node between nodes "
        "(default: from network)"
    )  # fmt: skip
    max_restarts: int = Field(
        0,
        ge=0,
        description="restarts after a platform failure (rank lost, comm, hardware, hang), "
        "each from the newest verified checkpoint",
    )

    @field_validator("zero_stage", mode="before")
    @classmethod
    def _zero_stage_text(cls, v: Any) -> Any:
        # "3" from a form or --set arrives as text; "auto" stays the one string allowed.
        if isinstance(v, str) and v.strip().isdigit():
            return int(v.strip())
        if isinstance(v, bool):
            raise ValueError('expected "auto", 0, 2 or 3')
        return v

    @property
    def checkpointing(self) -> str:
        """The checkpointing mode: activation_checkpointing, else gradient_checkpointing's
        alias (on = full, off = none)."""
        if self.activation_checkpointing is not None:
            return self.activation_checkpointing
        return "full" if self.gradient_checkpointing else "none"

    @property
    def effective_lora_alpha(self) -> float:
        """lora_alpha, or the default 2 x lora_rank."""
        return self.lora_alpha if self.lora_alpha is not None else 2.0 * self.lora_rank


MULTI_GPU_KEYS = (
    "data_parallel_size",
    "zero_stage",
    "gradient_accumulation_steps",
    "global_batch_size",
    "cpu_offload",
    "tensor_parallel_size",
    "context_parallel_size",
    "pipeline_parallel_size",
    "expert_parallel_size",
)

# Knobs that are the job's own (contracts section 1) but may be written among the
# hyperparameters, as the seed does ("Set gpu_count above 1 on ... job").
JOB_KEYS = ("method", "model", "gpu", "gpu_count", "dataset", "output", "hosts", "rdzv_endpoint",
            "rdzv_port")  # fmt: skip


class JobConfig(BaseModel):
    """A job: method + model + GPU type + gpu_count + dataset + output + hyperparameters."""

    model_config = ConfigDict(extra="forbid")

    method: str = Field("sft_text", description="sft_text or dpo")
    model: str | None = Field(
        None, description="local checkpoint directory or Hub id (default: bundled tiny model)"
    )
    gpu: str = Field(DEFAULT_GPU, description="GPU type, e.g. L4-24GB, H100-80GB, custom-48GB")
    gpu_count: int = Field(1, description="GPUs (training processes)")
    dataset: str | None = Field(None, description="JSONL dataset file")
    output: str | None = Field(None, description="output directory for the final artifact")
    hosts: list[str] | None = Field(
        None, description="SSH hosts, one node each, node 0 first (several: a multi-node job)"
    )
    rdzv_endpoint: str | None = Field(
        None, description="node 0's address[:port] as the other nodes reach it "
        "(default: the address SSH used, port rdzv_port)"
    )  # fmt: skip
    rdzv_port: int | None = Field(
        None, ge=1, le=65535, description="node 0's rendezvous port (default: a free one there)"
    )
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)

    @property
    def nodes(self) -> int:
        """Machines the job runs on: one per host (1 without hosts)."""
        return max(len(self.hosts or ()), 1)

    def hyperparameters_set(self) -> dict[str, Any]:
        """Only the knobs the user set, under their canonical names (for records and pins)."""
        hp = self.hyperparameters
        return {k: getattr(hp, k) for k in sorted(hp.model_fields_set)}
