"""Validation at submit: every refusal of the seed's list, reported together, each named."""

from __future__ import annotations

from typing import Any

import pytest

from veri_tui.errors import VeriError
from veri_tui.plan import job_from_fields, validate


def errors_for(**fields: Any) -> dict[str, str]:
    job = job_from_fields({"gpu_count": 4, **fields})
    return {e.key: e.message for e in validate(job)}


def test_accepted_job_has_no_errors() -> None:
    assert errors_for() == {}
    assert errors_for(data_parallel_size=4, global_batch_size=16, micro_batch_size=2) == {}


def test_dp_not_world_size_reads_exactly() -> None:
    errs = errors_for(data_parallel_size=2)
    assert errs["data_parallel_size"].startswith("TP*CP*DP*PP=2 != WORLD_SIZE=4")


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"global_batch_size": 10, "micro_batch_size": 1, "gradient_accumulation_steps": 2}, "= 8"),
        ({"global_batch_size": 10}, "not a multiple of micro_batch_size x gpu_count = 1 x 4"),
    ],
)
def test_global_batch_size_rules(fields: dict, needle: str) -> None:
    assert needle in errors_for(**fields)["global_batch_size"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tensor_parallel_size", 2),
        ("context_parallel_size", 2),
        ("pipeline_parallel_size", 2),
        ("expert_parallel_size", 8),
    ],
)
def test_unavailable_parallelism(key: str, value: int) -> None:
    assert "not available" in errors_for(**{key: value})[key]


def test_zero_stage_1_points_to_2() -> None:
    assert "use zero_stage 2" in errors_for(zero_stage=1)["zero_stage"]


def test_cpu_offload_needs_sharding() -> None:
    assert "zero_stage 3" in errors_for(zero_stage=0, cpu_offload=True)["cpu_offload"]


@pytest.mark.parametrize("fields", [{"zero_stage": 3}, {"zero_stage": 2}, {"cpu_offload": True}])
def test_sharding_knob_on_one_gpu(fields: dict) -> None:
    errs = errors_for(gpu_count=1, **fields)
    assert any("gpu_count > 1" in m for m in errs.values())


@pytest.mark.parametrize("key", ["use_unsloth", "load_in_4bit", "use_liger"])
def test_single_gpu_only_options(key: str) -> None:
    lora = {"lora_rank": 16} if key == "load_in_4bit" else {}  # QLoRA trains adapters
    assert "single GPU only" in errors_for(**{key: True}, **lora)[key]
    assert errors_for(gpu_count=1, **{key: True}, **lora) == {}


def test_qlora_needs_adapters() -> None:
    msg = errors_for(gpu_count=1, load_in_4bit=True)["load_in_4bit"]
    assert "set lora_rank" in msg


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"activation_checkpointing": "selective"}, False),
        ({"activation_checkpointing": "none", "gradient_checkpointing": False}, False),
        ({"activation_checkpointing": "selective", "gradient_checkpointing": True}, False),
        ({"activation_checkpointing": "full", "gradient_checkpointing": False}, True),
        ({"activation_checkpointing": "none", "gradient_checkpointing": True}, True),
    ],
)
def test_checkpointing_and_its_alias(fields: dict, refused: bool) -> None:
    errs = errors_for(gpu_count=1, **fields)
    assert ("activation_checkpointing" in errs) == refused
    if refused:
        assert "contradicts gradient_checkpointing" in errs["activation_checkpointing"]


@pytest.mark.parametrize("method", ["grpo", "grpo_harness", "sft_video_gen"])
def test_other_methods(method: str) -> None:
    assert "multi-GPU keys" in errors_for(method=method, zero_stage=3)["method"]
    only = errors_for(method=method, gpu_count=1)["method"]
    assert "not supported by the bundled trainer" in only


def test_precision_refusals() -> None:
    assert "not available" in errors_for(precision="fp16")["precision"]
    assert "not available" in errors_for(precision="fp8")["precision"]
    assert "unknown precision" in errors_for(precision="int8")["precision"]


def test_the_values_a_knob_runs_are_its_declarations_words() -> None:
    """precision, zero_stage and network refuse what their `available` lacks, in its words
    (knobs/fields.py), the way out naming the values that run."""
    assert errors_for(precision="fp16")["precision"] == "fp16 is not available; use bf16 or fp32"
    assert errors_for(precision="int8")["precision"] == "unknown precision 'int8'; use bf16 or fp32"
    assert errors_for(zero_stage=5)["zero_stage"] == 'expected "auto", 0, 2 or 3 (got 5)'
    assert errors_for(network="wifi")["network"] == (
        "unknown network 'wifi'; use ethernet or infiniband (or set internode_bandwidth_gbps)"
    )


def test_unknown_gpu_lists_known_names() -> None:
    msg = errors_for(gpu="H100")["gpu"]
    assert "H100-80GB" in msg and "custom-<N>GB" in msg


def test_all_errors_reported_together() -> None:
    errs = errors_for(data_parallel_size=2, zero_stage=1, tensor_parallel_size=2, precision="fp16")
    assert set(errs) == {"data_parallel_size", "zero_stage", "tensor_parallel_size", "precision"}
    # TP/CP/PP run at 1 (others are refused), so the product is dp alone.
    assert errs["data_parallel_size"].startswith("TP*CP*DP*PP=2 != WORLD_SIZE=4")


def test_unknown_key_names_closest() -> None:
    with pytest.raises(VeriError) as exc:
        job_from_fields({"lora_rnk": 8, "micro_batch_sise": 2})
    msgs = {e.key: e.message for e in exc.value.errors}
    assert "'lora_rank'" in msgs["lora_rnk"]
    assert "'micro_batch_size'" in msgs["micro_batch_sise"]


def test_type_errors_name_the_key() -> None:
    with pytest.raises(VeriError) as exc:
        job_from_fields({"lora_rank": "many", "zero_stage": "four", "micro_batch_size": 0})
    keys = {e.key for e in exc.value.errors}
    assert keys == {"lora_rank", "zero_stage", "micro_batch_size"}


def test_batch_size_alias() -> None:
    job = job_from_fields({"batch_size": 4})
    assert job.hyperparameters.micro_batch_size == 4
    with pytest.raises(VeriError, match="alias"):
        job_from_fields({"batch_size": 4, "micro_batch_size": 2})
