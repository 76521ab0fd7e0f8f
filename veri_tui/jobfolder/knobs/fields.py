"""The knobs: every hyperparameter of a job (`Hyperparameters`), each once.

A new knob is one `knob(...)` here plus the code that reads it: the planner accepts,
checks and documents it, the trainer receives it (TrainConfig inherits these fields), the
app shows it where it names a form `section`, `veri-tui plan --help` lists it. Field order
is the order of the form's fields within a section, of `--help`, and of job.json's keys.
`knob(default, description, ...)` takes the Knob metadata of schema.py: bounds (ge, gt,
le, finite), unit, alias, pin, multi_gpu, error, and the form's section, label and hint.
"""

# No `from __future__ import annotations`: the field types stay objects, so reading them
# (schema.table) needs no typing.get_type_hints, which compiles every annotation string.
from dataclasses import dataclass
from typing import Literal, get_args

from veri_tui.jobfolder.knobs.rules import checkpointing_mode
from veri_tui.jobfolder.knobs.schema import knob

METHODS_TRAINED = ("sft_text", "dpo")
# Known to the managed service, planned for nothing here (contracts section 1).
METHODS_OTHER = ("grpo", "grpo_harness", "sft_video_gen")
METHODS = METHODS_TRAINED + METHODS_OTHER
DEFAULT_GPU = "L4-24GB"

#: What a layer keeps for backward (veri_tui/trainer/checkpointing.py): nothing, a selection, all.
Checkpointing = Literal["none", "selective", "full"]
CHECKPOINTING: tuple[Checkpointing, ...] = get_args(Checkpointing)
#: The learning-rate schedule after the linear warmup (veri_tui/trainer/schedule.py).
LrScheduler = Literal["cosine", "linear", "constant"]
LR_SCHEDULERS: tuple[str, ...] = get_args(LrScheduler)
#: Where the metric lines also go, besides metrics.jsonl (veri_tui/trainer/tracking.py).
Tracker = Literal["tensorboard", "trackio", "wandb", "mlflow"]
TRACKERS: tuple[str, ...] = get_args(Tracker)

#: The app's form sections, in the order the form shows them.
SECTIONS = ("Job", "Parallelism", "LoRA and lengths", "Training", "Not available",
            "Single-GPU only")  # fmt: skip
_PAR, _LORA, _TRAIN, _NA, _ONE = SECTIONS[1:]


# No __init__, __repr__ or __eq__ of its own (each costs an exec at import): the planner's
# KnobModel and the trainer's TrainConfig make theirs.
@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Hyperparameters:
    """Every knob of a job: the multi-GPU ones of the seed and the trainer's training keys."""

    # fmt: off
    # --- multi-GPU knobs (Ultra-Scale Playbook vocabulary) ---
    data_parallel_size: int | None = knob(
        None, "DP degree; must equal gpu_count (leave unset to follow it)",
        pin=True, multi_gpu=True, section=_PAR, hint="= gpu_count")
    zero_stage: Literal["auto"] | int = knob(
        "auto", '"auto" (0 if the states fit one GPU, else 3), 0 = DDP, 2 or 3 = FSDP2; '
        "1 is not available (use 2)", pin=True, multi_gpu=True,
        error='expected "auto", 0, 2 or 3', section=_PAR, choices=("auto", "0", "1", "2", "3"),
        available=("auto", 0, 2, 3))
    micro_batch_size: int = knob(
        1, "samples per GPU per forward/backward (alias: batch_size)", ge=1,
        alias="batch_size", pin=True, section=_PAR)
    gradient_accumulation_steps: int | None = knob(
        None, "micro-batches per optimizer step (default: from gbs, else 1)", ge=1,
        pin=True, multi_gpu=True, section=_PAR, label="grad_accumulation", hint="auto")
    global_batch_size: int | None = knob(
        None, "samples per optimizer step = mbs x grad_acc x gpu_count", ge=1,
        unit="samples", pin=True, multi_gpu=True, section=_PAR, hint="auto")
    precision: str = knob(
        "bf16", '"bf16" (default: bf16 weights and moments, stochastically rounded AdamW) or '
        '"fp32" (fp32 master weights, bf16 compute); LoRA adapters are fp32 in both',
        pin=True, section=_PAR, choices=("bf16", "fp32", "fp16", "fp8"),
        available=("bf16", "fp32"))
    gradient_checkpointing: bool = knob(
        True, "recompute activations in backward (on: full, off: none)",
        pin=True, section=_PAR, label="grad checkpointing")
    activation_checkpointing: Checkpointing | None = knob(
        None, '"none", "selective" (keep attention and every other matmul output) or '
        '"full" (default: from gradient_checkpointing)',
        pin=True, section=_PAR, label="checkpointing", hint="from switch")
    cpu_offload: bool = knob(
        False, "keep weights, grads and optimizer states in host memory (ZeRO-3)",
        pin=True, multi_gpu=True, section=_PAR)
    lora_rank: int = knob(0, "LoRA rank; 0 = full fine-tune", ge=0, section=_LORA)
    lora_alpha: float | None = knob(
        None, "LoRA alpha (default 2 x lora_rank)", gt=0, section=_LORA, hint="2 x lora_rank")
    # Not on the form (a list; and the form's snapshots stay as they are): veri.toml, --set.
    lora_target_modules: list[str] | None = knob(
        None, 'module names LoRA adapts, e.g. ["q_proj", "v_proj"] (default: every attention '
        "and MLP projection the model has; attention only in a mixture of experts)")
    lora_dropout: float = knob(0.0, "dropout on the LoRA adapters' input, in [0, 1)", ge=0, lt=1)
    tensor_parallel_size: int = knob(1, "only 1 (TP is not available)", multi_gpu=True,
                                     unavailable="tensor parallelism",
                                     section=_NA, label="tensor_parallel", hint="only 1")
    context_parallel_size: int = knob(1, "only 1 (CP is not available)", multi_gpu=True,
                                      unavailable="context parallelism",
                                      section=_NA, label="context_parallel", hint="only 1")
    pipeline_parallel_size: int = knob(
        1, "only 1 (PP is not available)", multi_gpu=True, unavailable="pipeline parallelism",
        section=_NA, label="pipeline_parallel", hint="only 1")
    expert_parallel_size: int = knob(1, "only 1 (EP is not available)", multi_gpu=True,
                                     unavailable="expert parallelism",
                                     section=_NA, label="expert_parallel", hint="only 1")
    use_unsloth: bool = knob(False, "Unsloth kernels (single GPU only)", section=_ONE)
    load_in_4bit: bool = knob(
        False, "QLoRA: NF4 base under the LoRA adapters (one CUDA GPU, lora_rank > 0)",
        section=_ONE)
    use_liger: bool = knob(False, "Liger kernels (single GPU only)", section=_ONE)

    # --- training keys (read by the bundled trainer) ---
    learning_rate: float = knob(1e-4, "peak AdamW learning rate", gt=0, section=_TRAIN)
    max_steps: int | None = knob(
        None, "optimizer steps to run; overrides num_epochs", ge=1, unit="steps",
        section=_TRAIN, hint="from num_epochs")
    num_epochs: int = knob(1, "passes over the dataset (unless max_steps)", ge=1, section=_TRAIN)
    warmup_steps: int = knob(
        0, "linear warmup, in optimizer steps", ge=0, unit="steps", section=_TRAIN)
    lr_scheduler: LrScheduler = knob(
        "cosine", '"cosine" (default: to 0 at the last step), "linear" (to 0) or "constant", '
        "after the warmup", choices=LR_SCHEDULERS)
    weight_decay: float = knob(0.0, "AdamW weight decay", ge=0)
    max_grad_norm: float = knob(1.0, "gradient clipping norm (0 = off)", ge=0)
    adam_beta1: float = knob(
        0.9, "AdamW's first-moment (momentum) decay, in [0, 1)", ge=0, lt=1)
    adam_beta2: float = knob(
        0.999, "AdamW's second-moment decay, in [0, 1) (e.g. 0.95 for steadier large-batch "
        "or low-precision runs)", ge=0, lt=1)
    seed: int = knob(42, "seed for init, shuffling and dropout", section=_TRAIN)
    beta: float = knob(0.1, "DPO temperature (dpo only)", gt=0, section=_TRAIN, methods=("dpo",))
    max_seq_length: int = knob(
        2048, "tokens per sample, longer ones truncated (sft_text)", ge=8, unit="tokens",
        section=_LORA, methods=("sft_text",))
    max_length: int = knob(
        1024, "tokens per prompt+response, each of chosen/rejected (dpo)", ge=8,
        unit="tokens", section=_LORA, methods=("dpo",))
    # Not on the form (its snapshots stay as they are): veri.toml, --set.
    packing: bool = knob(
        False, "several samples in each row of max_seq_length tokens (sft_text); attention "
        "and loss never cross a sample's boundary; global_batch_size then counts packed rows",
        methods=("sft_text",))
    checkpoint_steps: int | None = knob(
        None, "save a resumable checkpoint every N optimizer steps", ge=1, unit="steps",
        section=_TRAIN, hint="off")
    # (planning only: the cost line; the trainer ignores it)
    price_per_gpu_hour: float | None = knob(
        None, "USD per GPU-hour for the cost line (default: $VERI_HOME/prices.toml, else "
        "the GPU type's list price)", gt=0, finite=True, unit="USD",
        section=_TRAIN, label="$/GPU-hour", hint="list price")
    keep_checkpoints: int = knob(2, "complete checkpoints kept (newest)", ge=1)
    resume: bool = knob(False, "continue from the newest complete checkpoint of this job")
    logging_steps: int = knob(1, "write a metric line every N steps", ge=1, unit="steps")
    artifact_shard_bytes: int = knob(
        5_000_000_000, "largest safetensors file of a full fine-tune's artifact, in bytes "
        "(default 5 GB, as save_pretrained)", ge=1, unit="bytes")
    hang_timeout_s: float | None = knob(
        None, "seconds without progress on any rank before the job fails RANK_HUNG "
        "(default: 300 or 10 x the slowest step, x4 while loading or saving)", gt=0,
        unit="seconds")
    load_timeout_s: float | None = knob(
        None, "seconds without progress on any rank before the first step (the rendezvous, "
        "the data, the model) before the job fails RANK_HUNG (default 1800)", gt=0,
        unit="seconds")
    # --- planning only, multi-node jobs (the trainer ignores them) ---
    network: str = knob(
        "ethernet", "the link between nodes: ethernet (default 25 Gb/s per node) or "
        "infiniband (default 400 Gb/s per node)", available=("ethernet", "infiniband"))
    internode_bandwidth_gbps: float | None = knob(
        None, "Gb/s per node between nodes (default: from network)", gt=0, finite=True,
        unit="Gb/s")
    network_measured: str | None = knob(
        None, "where internode_bandwidth_gbps was measured; set by `veri-tui probe` and a "
        "multi-node launch's probe (planning only)")
    max_restarts: int = knob(
        0, "restarts after a platform failure (rank lost, comm, hardware, hang), "
        "each from the newest verified checkpoint", ge=0)
    # --- evaluation (issue 27; the trainer's veri_tui/trainer/evaluate.py, the planner's peak and
    # cost): the rows are the job's eval_dataset (job.py), else eval_fraction of its data ---
    eval_fraction: float = knob(
        0.0, "share of the dataset's rows held out for eval_loss, 0 to 0.9 (seeded; "
        "ignored when eval_dataset is set)", ge=0, le=0.9, section=_TRAIN, hint="0: none")
    eval_steps: int | None = knob(
        None, "eval_loss every N optimizer steps, and at the end (default: at the end "
        "only, when there are eval rows)", ge=1, unit="steps", section=_TRAIN, hint="at end")
    # --- tracking (issue 27; veri_tui/trainer/tracking.py): rank 0 sends each metric line to these
    # too, under Hugging Face Trainer's names; each is an optional extra (pyproject.toml) ---
    report_to: Tracker | list[Tracker] | None = knob(
        None, '"tensorboard", "trackio", "wandb" or "mlflow", or a list of them: trackers '
        "each metric line also goes to (default: metrics.jsonl only)",
        error='expected "tensorboard", "trackio", "wandb", "mlflow" or a list of them')
    # fmt: on

    @property
    def checkpointing(self) -> Checkpointing:
        """The checkpointing mode: activation_checkpointing, else gradient_checkpointing's
        alias (on = full, off = none)."""
        return checkpointing_mode(self.activation_checkpointing, self.gradient_checkpointing)

    @property
    def effective_lora_alpha(self) -> float:
        """lora_alpha, or the default 2 x lora_rank."""
        return self.lora_alpha if self.lora_alpha is not None else 2.0 * self.lora_rank
