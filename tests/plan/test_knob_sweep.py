"""No knob the planner accepts is ignored by the memory model: each one is varied from one
accepted job to another, and either the peak per GPU (or the host memory) changes, or the
knob is listed here as not affecting it, with why, and the peak is checked unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.synthetic import QWEN3_0_6B, write_checkpoint

from veri_tui.plan import plan
from veri_tui.plan.knobs import Hyperparameters

BASE = {"gpu": "H100-80GB", "gpu_count": 2, "zero_stage": 3, "micro_batch_size": 2}
# knob: (its value in the base job or a variant, the other value, the job's other keys)
MEMORY = {
    "zero_stage": (3, 0, {}),
    "micro_batch_size": (2, 4, {}),
    "batch_size": (2, 4, {}),  # micro_batch_size's alias
    "precision": ("bf16", "fp32", {}),
    "gradient_checkpointing": (True, False, {}),
    "activation_checkpointing": ("full", "selective", {}),
    "cpu_offload": (False, True, {}),
    "lora_rank": (0, 16, {}),
    "lora_target_modules": (None, ["q_proj"], {"lora_rank": 16}),  # the adapter's states
    "load_in_4bit": (False, True, {"gpu_count": 1, "zero_stage": 0, "lora_rank": 16}),
    "max_seq_length": (2048, 1024, {}),
    "max_length": (1024, 512, {"method": "dpo"}),
    "gpu_count": (2, 4, {}),
    "method": ("sft_text", "dpo", {}),  # the reference model, chosen and rejected
    # FSDP2's gradient shards exist from a step's first backward on: a later micro-batch's
    # backward starts with them (veri_tui/plan/moments.py); the activations do not add up.
    "gradient_accumulation_steps": (1, 4, {}),
    "global_batch_size": (4, 16, {}),  # sets gradient_accumulation_steps (above)
    # Packed rows attend with a mask: the memory-efficient kernel keeps k and v repeated to
    # every head and an S x S bias per layer (veri_tui/plan/activations.py); checkpointed,
    # only the recomputed layer holds them, below the loss's backward here.
    "packing": (False, True, {"activation_checkpointing": "none"}),
}
NOT_MEMORY = {
    "data_parallel_size": (2, "must equal gpu_count (refused otherwise): gpu_count divides"),
    "lora_alpha": (64.0, "a scale applied in the forward, no tensor"),
    "lora_dropout": (
        0.1,
        "NOT MODELLED (a known gap): with p > 0 peft keeps each adapted linear's dropped "
        "input and mask for backward; the plan counts the adapters' activations as p = 0",
    ),
    "tensor_parallel_size": (1, "only 1 is accepted"),
    "context_parallel_size": (1, "only 1 is accepted"),
    "pipeline_parallel_size": (1, "only 1 is accepted"),
    "expert_parallel_size": (1, "only 1 is accepted"),
    "use_unsloth": (True, "not run by the bundled trainer (the plan warns it is ignored)"),
    "use_liger": (True, "not run by the bundled trainer (the plan warns it is ignored)"),
    "price_per_gpu_hour": (9.0, "the cost line only"),
    "learning_rate": (3e-4, "a scalar of AdamW's in-place update"),
    "num_epochs": (3, "how many steps, not what a step holds"),
    "max_steps": (7, "how many steps, not what a step holds"),
    "warmup_steps": (2, "the learning rate's schedule"),
    "lr_scheduler": ("linear", "the learning rate's schedule"),
    "weight_decay": (0.1, "applied in place by AdamW"),
    "adam_beta1": (0.8, "a scalar of AdamW's moment update"),
    "adam_beta2": (0.95, "a scalar of AdamW's moment update"),
    "max_grad_norm": (0.5, "clipping scales the gradients in place (per-tensor norms)"),
    "seed": (7, "which samples, not their shapes (the plan takes full-length samples)"),
    "beta": (0.5, "DPO's temperature, a scalar"),
    "checkpoint_steps": (2, "DCP writes the shards it holds to disk (the disk: line)"),
    "keep_checkpoints": (5, "checkpoints on disk"),
    "resume": (True, "a resumed step holds what a fresh one does"),
    "logging_steps": (3, "a metric line"),
    "artifact_shard_bytes": (10**9, "the artifact's files on disk, after training"),
    "hang_timeout_s": (600.0, "the supervisor's watchdog"),
    "load_timeout_s": (600.0, "the supervisor's watchdog"),
    "network": ("infiniband", "the multi-node collectives' time"),
    "internode_bandwidth_gbps": (800.0, "the multi-node collectives' time"),
    "network_measured": ("by veri-tui probe", "where the network figure came from, a note"),
    "max_restarts": (3, "attempts after a platform failure"),
    # The eval forward holds less than a training step's backward (no gradients of the
    # logits): it is in the peak record (eval_bytes), below the peak, so the peak stays.
    "eval_fraction": (0.1, "an eval forward at the same micro-batch, below the step's peak"),
    "eval_steps": (5, "how often the eval forward runs, not what it holds"),
    "report_to": ("tensorboard", "rank 0 writes the metric lines to a tracker, on the host"),
    "gpu": (
        "L4-24GB",
        "the job's bytes are the same on any GPU: the GPU is what they are set "
        "against (its memory, the budget; the plan says whether they fit)",
    ),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "qwen3-0.6b"
    write_checkpoint(path, QWEN3_0_6B)
    return path


def _memory(model: Path, **knobs: Any) -> tuple[int, int]:
    base = {
        k: v for k, v in BASE.items() if not ("batch_size" in knobs and k == "micro_batch_size")
    }
    rec = plan(model=str(model), **{**base, **knobs})
    return rec.activations["peak"]["peak_bytes"], rec.host_bytes_per_node


def test_every_knob_is_swept() -> None:
    knobs = set(Hyperparameters.knob_table) | {"batch_size", "gpu", "gpu_count", "method"}
    assert set(MEMORY) | set(NOT_MEMORY) == knobs
    assert not set(MEMORY) & set(NOT_MEMORY)


@pytest.mark.parametrize("knob", sorted(MEMORY))
def test_memory_knobs_change_the_peak(model: Path, knob: str) -> None:
    base, other, extra = MEMORY[knob]
    assert _memory(model, **{**extra, knob: base}) != _memory(model, **{**extra, knob: other})


@pytest.mark.parametrize("knob", sorted(NOT_MEMORY))
def test_the_other_knobs_leave_it_unchanged(model: Path, knob: str) -> None:
    value, why = NOT_MEMORY[knob]
    assert why
    extra = {"lora_rank": 8} if knob in ("lora_alpha", "lora_dropout") else {}
    extra |= {"method": "dpo"} if knob == "beta" else {}
    extra |= {"gpu_count": 1, "zero_stage": 0} if knob in ("use_unsloth", "use_liger") else {}
    assert _memory(model, **extra) == _memory(model, **{**extra, knob: value})
