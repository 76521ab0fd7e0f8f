"""The plan's optimizer term (veri_tui/plan/optimizer_time.py): the way each precision updates,
its launches and bytes on the GPU, the host step with cpu_offload, in the step time."""

from __future__ import annotations

from typing import Any

import pytest

from veri_tui.plan import optimizer_time as ot
from veri_tui.plan.gpus import get_gpu
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.throughput import HBM_GBPS, estimate_throughput


def _tp(info: ModelInfo, **knobs: Any) -> dict[str, Any]:
    base = {"method": "sft_text", "gpu_count": 8, "zero_stage": 3, "precision": "bf16",
            "lora_rank": 0, "micro_batch_size": 1, "gradient_accumulation_steps": 1,
            "max_seq_length": 2048, "max_length": 1024, "gradient_checkpointing": True}  # fmt: skip
    return estimate_throughput(info, get_gpu("H100-80GB"), **{**base, **knobs})


def test_each_precision_updates_its_way(infos: dict[str, ModelInfo]) -> None:
    qwen = infos["qwen3-0.6b"]
    assert _tp(qwen)["optimizer"]["way"] == "compiled"  # 596M >= 2^25: one kernel a tensor
    assert _tp(qwen, precision="fp32")["optimizer"]["way"] == "torch foreach"
    assert _tp(qwen, lora_rank=16)["optimizer"]["way"] == "torch foreach"
    assert _tp(qwen, cpu_offload=True)["optimizer"]["way"] == "host native"
    small = qwen._replace(parameter_count=ot.SR_COMPILE_MIN_PARAMETERS - 1)
    assert _tp(small)["optimizer"]["way"] == "eager"
    # Qwen3-0.6B: 28 layers x 11 tensors (q/k/v/o, 3 MLP, 2 norms, q/k norms), the tied
    # embedding and the final norm: 310, 197 of them 2-D, as the benchmark's model has.
    assert ot.trainable_tensors(qwen, 0) == (310, 197)


def test_launches_plus_traffic_on_the_gpu(infos: dict[str, ModelInfo]) -> None:
    """The compiled bf16 update: a kernel a tensor, a view a 2-D gradient, 14 bytes an
    element; clipping's op a tensor and 6 bytes (3 passes of a bf16 gradient); at H100's
    3,350 GB/s; stage 3 moves an eighth."""
    qwen = infos["qwen3-0.6b"]
    whole, shard = _tp(qwen, zero_stage=0)["optimizer"], _tp(qwen)["optimizer"]
    n = qwen.parameter_count
    assert whole["elements"] == n and shard["elements"] == -(-n // 8)
    assert whole["bytes"] == (14 + 6) * n
    ops = (310 + 197 + 12) + (310 + 9)  # the benchmark's 519 for the update
    want = ops * ot.LAUNCH_S + whole["bytes"] / (HBM_GBPS["H100-80GB"] * 1e9)
    assert _tp(qwen, zero_stage=0)["optimizer_s"] == pytest.approx(want)
    # Stage 3 moves an eighth of the bytes; its launches are the same (one a tensor).
    assert shard["bytes"] == pytest.approx(whole["bytes"] / 8, rel=1e-6)
    assert shard["ops"] == whole["ops"]
    assert _tp(qwen)["optimizer_s"] < _tp(qwen, zero_stage=0)["optimizer_s"]
    fp32 = _tp(qwen, precision="fp32", zero_stage=0)["optimizer"]
    assert fp32["bytes"] == (84 + 12) * n  # torch's foreach AdamW on fp32 masters


def test_offload_puts_the_host_step_in_the_step_time(infos: dict[str, ModelInfo]) -> None:
    """70B over 8 ranks with cpu_offload: each rank's 8.8B elements updated on the host,
    memory-bound at the rank's share of the host's bandwidth; the step time holds it."""
    llama = infos["llama-3.1-70b"]
    tp = _tp(llama, cpu_offload=True)
    opt = tp["optimizer"]
    per_rank, tensors = -(-llama.parameter_count // 8), 80 * 9 + 3  # untied head
    assert opt["way"] == "host native" and opt["elements"] == per_rank
    assert ot.trainable_tensors(llama, 0) == (tensors, 80 * 7 + 2)
    bound = (14 + 6) * per_rank / (ot.HOST_GBPS_PER_GPU * 1e9)
    assert tp["optimizer_s"] == pytest.approx(bound + tensors * ot.HOST_PER_TENSOR_S)
    # The layers' share of the host step hides behind the next forward's matmuls (the
    # trainer updates unit by unit beside it): at most the forward's third of the compute
    # without recomputation, a quarter with full checkpointing; the root's share never.
    hidden = opt["hidden_s"]
    assert 0 < hidden <= tp["compute_s"] / 4
    parts = tp["compute_s"] + tp["exposed_communication_s"] + tp["optimizer_s"] - hidden
    assert tp["step_time_s"] == pytest.approx(parts)
    assert tp["optimizer_s"] - hidden > 5  # seconds: the term the plan was missing
    assert _tp(llama)["optimizer"]["hidden_s"] == 0  # on the GPU: nothing beside the forward
    assert opt["host_one_thread_s"] == pytest.approx(
        per_rank * (ot.HOST_NATIVE_S + 3 * ot.HOST_CLIP_S) + tensors * ot.HOST_PER_TENSOR_S
    )
