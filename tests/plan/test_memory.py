"""The memory model of contracts section 3, case by case, as exact integers."""

from __future__ import annotations

import itertools

import pytest

from veri_tui.plan import GPU_CATALOG, get_gpu
from veri_tui.plan.memory import estimate_states
from veri_tui.plan.model_info import ModelInfo


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def test_budget_figures() -> None:
    assert f"{get_gpu('L4-24GB').budget_bytes / 1e9:.1f}" == "15.3"
    assert f"{get_gpu('H100-80GB').budget_bytes / 1e9:.1f}" == "54.5"
    assert get_gpu("L4-24GB").budget_bytes == (24 * 10**9 - 2 * 1024**3) * 7 // 10
    assert get_gpu("custom-48GB").budget_bytes == (48 * 10**9 - 2 * 1024**3) * 7 // 10


def test_catalog_names_follow_the_seed() -> None:
    assert list(GPU_CATALOG) == [
        "L4-24GB",
        "A10G-24GB",
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H200-141GB",
        "B200-180GB",
    ]
    for gpu in GPU_CATALOG.values():
        assert gpu.memory_bytes == int(gpu.name.split("-")[1][:-2]) * 10**9
        assert gpu.bf16_dense_tflops and gpu.busbw_gbps > 0


CASES = list(itertools.product(("bf16", "fp32"), (0, 2, 3), (0, 16), ("sft_text", "dpo")))


@pytest.mark.parametrize(("precision", "stage", "rank", "method"), CASES)
def test_states_per_case(
    infos: dict[str, ModelInfo], precision: str, stage: int, rank: int, method: str
) -> None:
    info = infos["qwen3-0.6b"]
    n, dp = info.parameter_count, 4
    b = {"bf16": 8, "fp32": 16}[precision]
    if rank:
        # LoRA adapters are fp32 in either precision (veri_tui/trainer/model.py): 16 bytes/param.
        a = rank * info.lora_in_out_sum
        sharded, compute, trainable = 2 * n + 16 * a, n + a, a
    else:
        sharded, compute, trainable = b * n, n, n
    expected = {
        0: sharded,
        2: 2 * compute + ceil_div(sharded, dp),
        3: ceil_div(sharded, dp),
    }[stage]
    if method == "dpo" and rank == 0:
        # The reference model: whole under DDP, sharded per layer under FSDP2 (measured).
        expected += ceil_div(2 * n, dp) if stage else 2 * n
    est = estimate_states(
        info, precision=precision, zero_stage=stage, dp=dp, lora_rank=rank, dpo=method == "dpo"
    )
    assert est.states_bytes_per_gpu == expected
    assert est.trainable_parameter_count == trainable
    assert est.host_bytes_per_node == 0


def test_seed_worked_figure_8b_on_4_gpus(infos: dict[str, ModelInfo]) -> None:
    # "plan: dp=4 zero_stage=3 ... (auto: 8.0 GB states/GPU)": an 8B-class bf16 model.
    info = infos["llama-3.1-8b"]
    est = estimate_states(info, precision="bf16", zero_stage=3, dp=4)
    assert est.states_bytes_per_gpu == 8 * 8_030_261_248 // 4
    assert f"{est.states_bytes_per_gpu / 1e9:.1f}" == "16.1"
    qwen = estimate_states(infos["qwen3-0.6b"], precision="bf16", zero_stage=0, dp=4)
    assert f"{qwen.states_bytes_per_gpu / 1e9:.1f}" == "4.8"


@pytest.mark.parametrize(("precision", "rank"), [("bf16", 0), ("fp32", 0), ("bf16", 16)])
def test_cpu_offload_moves_states_to_host(
    infos: dict[str, ModelInfo], precision: str, rank: int
) -> None:
    info = infos["llama-3.1-8b"]
    n = info.parameter_count
    on = estimate_states(
        info, precision=precision, zero_stage=3, dp=4, lora_rank=rank, cpu_offload=True
    )
    off = estimate_states(info, precision=precision, zero_stage=3, dp=4, lora_rank=rank)
    b = {"bf16": 8, "fp32": 16}[precision]
    # LoRA: the bf16 base and fp32 adapters (16 bytes each, in either precision).
    whole = b * n if rank == 0 else 2 * n + 16 * info.adapter_parameters(rank)
    assert on.host_bytes_per_node == whole  # 4 ranks on one node hold all shards
    # The GPU holds what FSDP2 gathers: the root unit (embeddings, head, final norm: never
    # resharded after forward), two decoder layers, and one layer's unsharded bf16 gradient
    # (with its fp32 cast for an fp32 reduce).
    layers = info.layer_count
    root = info.embedding_parameters + info.lm_head_parameters + info.hidden_size
    layer = (n - root) // layers
    assert root == info.largest_layer_parameters  # Llama-8B: the root is the largest unit
    grads = layer if rank == 0 else -(-info.adapter_parameters(rank) // layers)
    per_grad = {"bf16": 2, "fp32": 2 + 4}["fp32" if rank else precision]  # fp32 adapters
    assert on.states_bytes_per_gpu == 2 * root + 2 * 2 * layer + per_grad * grads
    # Even for LoRA (a 4-GPU shard of the bf16 base, 4.0 GB) the gathered root (2.1 GB) and
    # two layers (0.9 GB) are less.
    assert on.states_bytes_per_gpu < off.states_bytes_per_gpu


def test_dpo_lora_has_no_reference_copy(infos: dict[str, ModelInfo]) -> None:
    info = infos["qwen3-0.6b"]
    sft = estimate_states(info, precision="bf16", zero_stage=0, dp=2, lora_rank=8)
    dpo = estimate_states(info, precision="bf16", zero_stage=0, dp=2, lora_rank=8, dpo=True)
    assert sft.states_bytes_per_gpu == dpo.states_bytes_per_gpu
    assert not dpo.dpo_reference


def test_dpo_reference_is_sharded_per_layer_under_fsdp2(infos: dict[str, ModelInfo]) -> None:
    # DPO full fine-tune at stages 2/3: the reference is sharded per decoder layer and
    # resharded after each layer's forward (measured: tests/trainer/test_state_bytes.py), so
    # stage 3 holds (8N + 2N) / dp in bf16 and (16N + 2N) / dp in fp32, not 2N + ... as the
    # seed's "reference in full".
    info = infos["qwen3-0.6b"]
    n, dp = info.parameter_count, 4
    for precision, b in (("bf16", 8), ("fp32", 16)):
        dpo = estimate_states(info, precision=precision, zero_stage=3, dp=dp, dpo=True)
        assert dpo.states_bytes_per_gpu == ceil_div(b * n, dp) + ceil_div(2 * n, dp)
        assert dpo.components["reference"] == ceil_div(2 * n, dp)
    ddp = estimate_states(info, precision="bf16", zero_stage=0, dp=dp, dpo=True)
    assert ddp.components["reference"] == 2 * n  # DDP: one whole copy, nothing sharded
