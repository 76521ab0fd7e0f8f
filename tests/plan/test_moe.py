"""Mixture-of-experts model info and plans, on header-only checkpoints of public MoE models.

Totals and active parameters as the model cards publish them; experts, routed per token, shared
experts and dense layers; DeepSeek's latent attention; gpt-oss's MXFP4 experts; LoRA targets
(attention only: veri_tui/jobfolder/knobs/lora_targets.py); FLOPs per token from the active
parameters; the `veri-tui plan` text and --json record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.synthetic import (
    DEEPSEEK_V2_LITE,
    DEEPSEEK_V3,
    GPT_OSS_20B,
    MIXTRAL_8X7B,
    QWEN1_5_MOE_A2_7B,
    QWEN3_30B_A3B,
    moe_tensors,
    write_checkpoint,
)

from veri_tui.cli import main
from veri_tui.plan import plan, read_model_info
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.throughput import flops_per_token

CONFIGS = {
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    "qwen1.5-moe-a2.7b": QWEN1_5_MOE_A2_7B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "deepseek-v2-lite": DEEPSEEK_V2_LITE,
    "deepseek-v3": DEEPSEEK_V3,
    "gpt-oss-20b": GPT_OSS_20B,
}
# (total, active) in billions as each card publishes them, and whether the card's active
# count includes the input embedding (Qwen, Mistral) or leaves it out (DeepSeek, OpenAI).
PUBLISHED = {
    "qwen3-30b-a3b": (30.5, 3.3, True),  # Qwen/Qwen3-30B-A3B: "30.5B in total, 3.3B activated"
    "qwen1.5-moe-a2.7b": (14.3, 2.7, True),  # Qwen1.5-MoE-A2.7B: 14.3B, 2.7B activated
    "mixtral-8x7b": (46.7, 12.9, True),  # Mistral: "46.7B total ... 12.9B parameters per token"
    "deepseek-v2-lite": (15.7, 2.4, False),  # DeepSeek-V2-Lite: 15.7B total, 2.4B activated
    "deepseek-v3": (671, 37, False),  # DeepSeek-V3: 671B total, 37B activated
    "gpt-oss-20b": (20.9, 3.6, False),  # openai/gpt-oss-20b card: 20.9B total, 3.6B active
}


@pytest.fixture(scope="module")
def moe_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("moe")
    for name, config in CONFIGS.items():
        write_checkpoint(root / name, config, shards=4, tensors=moe_tensors(config))
    return {name: root / name for name in CONFIGS}


@pytest.fixture(scope="module")
def moe(moe_dirs: dict[str, Path]) -> dict[str, ModelInfo]:
    return {name: read_model_info(str(path)) for name, path in moe_dirs.items()}


def _near(count: int, published: float) -> bool:
    """Equal at the published precision (one unit of its last digit)."""
    decimals = len(repr(published).split(".")[1]) if "." in repr(published) else 0
    return abs(count / 1e9 - published) < 10**-decimals


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_and_active_match_the_model_cards(moe: dict[str, ModelInfo], name: str) -> None:
    total, active, with_embedding = PUBLISHED[name]
    info = moe[name]
    assert _near(info.parameter_count, total), info.parameter_count
    counted = info.active_parameter_count
    if not with_embedding:
        counted -= info.embedding_parameters
    assert _near(counted, active), counted


def test_qwen3_30b_a3b_exact_counts(moe: dict[str, ModelInfo]) -> None:
    q = moe["qwen3-30b-a3b"]
    h, layers, per_expert = 2048, 48, 3 * 768 * 2048
    assert (q.experts, q.experts_per_token, q.shared_experts) == (128, 8, 0)
    assert (q.moe_layer_count, q.layer_count, q.moe_intermediate_size) == (48, 48, 768)
    assert q.routed_expert_parameters == layers * 128 * per_expert
    assert q.router_parameters == layers * 128 * h
    # Active = N less the 120 experts of 128 a token skips, in every layer.
    assert q.active_parameter_count == q.parameter_count - layers * 120 * per_expert
    assert q.parameter_count == 30_532_122_624 and q.active_parameter_count == 3_353_032_704


def test_shared_experts_and_dense_layers(moe: dict[str, ModelInfo]) -> None:
    ds = moe["deepseek-v3"]
    assert (ds.experts, ds.experts_per_token, ds.shared_experts) == (256, 8, 1)
    assert (ds.moe_layer_count, ds.layer_count) == (58, 61)  # first_k_dense_replace = 3
    assert ds.shared_expert_parameters == 58 * 3 * 2048 * 7168
    assert ds.shared_expert_intermediate_size == 2048
    lite = moe["deepseek-v2-lite"]
    assert (lite.shared_experts, lite.moe_layer_count, lite.layer_count) == (2, 26, 27)
    assert lite.shared_expert_intermediate_size == 2 * 1408
    qwen2 = moe["qwen1.5-moe-a2.7b"]  # one gated shared expert, 5632 wide
    assert (qwen2.shared_experts, qwen2.shared_expert_intermediate_size) == (1, 5632)
    assert qwen2.shared_expert_parameters == 24 * (3 * 5632 * 2048 + 2048)
    mixtral = moe["mixtral-8x7b"]
    assert (mixtral.experts, mixtral.experts_per_token, mixtral.shared_experts) == (8, 2, 0)


def test_latent_attention_shapes(moe: dict[str, ModelInfo]) -> None:
    ds = moe["deepseek-v3"]
    assert (ds.head_dim, ds.v_head_dim, ds.q_lora_rank, ds.kv_lora_rank) == (192, 128, 1536, 512)
    lite = moe["deepseek-v2-lite"]
    assert (lite.head_dim, lite.v_head_dim, lite.q_lora_rank) == (192, 128, 0)
    q = moe["qwen3-30b-a3b"]
    assert (q.head_dim, q.v_head_dim, q.kv_lora_rank) == (128, 128, 0)


def test_gpt_oss_mxfp4_experts_count_two_weights_per_byte(moe: dict[str, ModelInfo]) -> None:
    g = moe["gpt-oss-20b"]
    gate_up, down = 24 * 32 * 5760 * 2880, 24 * 32 * 2880 * 2880
    assert g.dtypes["MXFP4"] == gate_up + down  # the blocks; their scales are no parameters
    assert "U8" not in g.dtypes
    assert (g.experts, g.experts_per_token, g.moe_layer_count) == (32, 4, 24)
    biases = 24 * 32 * (5760 + 2880)
    assert g.routed_expert_parameters == gate_up + down + biases


def test_lora_adapts_attention_only_in_a_mixture_of_experts(moe: dict[str, ModelInfo]) -> None:
    q = moe["qwen3-30b-a3b"]
    assert q.lora_target_modules == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert q.lora_target_count == 48 * 4
    qd, kvd = 32 * 128, 4 * 128
    assert q.lora_in_out_sum == 48 * ((2048 + qd) + 2 * (2048 + kvd) + (qd + 2048))
    # DeepSeek's latent attention projections, none of its dense or shared MLPs.
    ds = moe["deepseek-v3"]
    assert ds.lora_target_modules == [
        "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "q_a_proj", "q_b_proj",
    ]  # fmt: skip
    assert ds.lora_target_count == 61 * 5


def test_flops_per_token_come_from_the_active_parameters(moe: dict[str, ModelInfo]) -> None:
    q = moe["qwen3-30b-a3b"]
    f = flops_per_token(q, 2048, lora=False, gc=True, dpo=False)
    matmul = q.active_parameter_count - q.embedding_parameters
    attention = 2 * 48 * (2 * 32 * 128) * 2048
    assert f["forward"] == 2 * matmul + attention
    assert f["total"] == 4 * f["forward"]  # forward, 2x backward, recompute
    assert 29e9 < f["total"] < 32e9  # ~30.8 GFLOP/token, not the ~250 that N would give
    assert f["router"] == 2 * 48 * 128 * 2048


def test_dense_models_are_unchanged(infos: dict[str, ModelInfo]) -> None:
    for info in infos.values():
        assert info.active_parameter_count == info.parameter_count
        assert (info.experts, info.moe_layer_count, info.experts_per_token) == (0, 0, 0)
        assert info.v_head_dim == info.head_dim
    rec = plan(model="assets/tiny-model", gpu="L4-24GB")
    assert not any(line.startswith("experts:") for line in rec.header_lines)


PLAN_LINE = re.compile(
    r"plan: dp=\d+ zero_stage=\d tp=1 cp=1 mbs=\d+ grad_acc=\d+ gbs=\d+ precision=\w+ "
    r"gradient_checkpointing=(on|off) \((auto|requested): \d+\.\d GB states/GPU\)"
)


def test_veri_tui_plan_prints_total_active_and_throughput_from_active(
    moe_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The must-show: Qwen3-30B-A3B on H100-80GB x8, as a user runs it."""
    args = ["plan", "--model", str(moe_dirs["qwen3-30b-a3b"]), "--gpu", "H100-80GB"]
    assert main([*args, "--gpu-count", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "30,532,122,624 parameters (30.53B)" in lines[0]
    experts = lines[1]
    assert experts.startswith("experts: 128 routed, 8 per token, no shared, in 48 of 48 layers")
    assert "3,353,032,704 active parameters per token (3.35B of 30.53B)" in experts
    plan_line = next(ln for ln in lines if ln.startswith("plan: "))
    assert PLAN_LINE.fullmatch(plan_line), plan_line  # contracts s.4, unchanged
    throughput = next(ln for ln in lines if ln.startswith("throughput: "))
    assert "(30.8 GFLOP/token from the 3.35B active parameters)" in throughput
    assert main([*args, "--gpu-count", "8", "--set", "lora_rank=16", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["active_parameter_count"] == 3_353_032_704
    assert rec["parameter_count"] == 30_532_122_624
    assert rec["model"]["experts"] == 128 and rec["model"]["experts_per_token"] == 8
    assert rec["throughput"]["active_parameter_count"] == 3_353_032_704
    assert rec["throughput"]["flops_per_token"] < 30e9  # LoRA: no weight gradients
    assert "LoRA adapts attention only (experts, router and MLPs frozen)" in rec["header_lines"][1]
    assert rec["trainable_parameter_count"] == 16 * 48 * (2048 + 4096 + 2 * (2048 + 512) + 6144)


def test_tiny_moe_plan_counts(tmp_path: Path) -> None:
    info = read_model_info("assets/tiny-moe")
    assert info.parameter_count == 156_544 and info.model_type == "qwen3_moe"
    assert (info.experts, info.experts_per_token, info.moe_layer_count, info.layer_count) == (
        8, 2, 1, 2,
    )  # fmt: skip
    # 6 of the 8 experts of layer 1 (3 x 32 x 64 each) are skipped by a token.
    assert info.active_parameter_count == 156_544 - 6 * 3 * 32 * 64
    assert info.lora_target_count == 2 * 4


def test_unknown_experts_per_token_counts_every_expert_active(tmp_path: Path) -> None:
    config = {k: v for k, v in MIXTRAL_8X7B.items() if k != "num_experts_per_tok"}
    config["num_hidden_layers"] = 2
    write_checkpoint(tmp_path / "m", config, tensors=moe_tensors(config))
    info = read_model_info(str(tmp_path / "m"))
    assert (info.experts, info.experts_per_token) == (8, 0)
    assert info.active_parameter_count == info.parameter_count  # FLOPs an upper bound
    rec = plan(model=str(tmp_path / "m"), gpu="H100-80GB")
    assert (
        "8 routed, ? (config.json names none: all counted active) per token"
        in (rec.header_lines[1])
    )


def test_expert_parallelism_stays_refused(moe_dirs: dict[str, Path]) -> None:
    from veri_tui.errors import VeriError

    model = str(moe_dirs["qwen3-30b-a3b"])
    with pytest.raises(VeriError) as err:
        plan(model=model, gpu="H100-80GB", gpu_count=8, expert_parallel_size=2)
    assert [r.key for r in err.value.errors] == ["expert_parallel_size"]
    # FSDP2 shards the experts like any parameter: ZeRO-3 divides every expert by dp.
    rec = plan(model=model, gpu="H100-80GB", gpu_count=8, zero_stage=3)
    assert rec.states_bytes_per_gpu == -(-8 * rec.parameter_count // 8)


def test_lora_on_experts_peaks_at_the_forwards_last_copy_out(moe_dirs: dict[str, Path]) -> None:
    """Qwen3-30B-A3B under LoRA at stage 3 (8 GPUs, 2048 tokens): a light backward, large
    gathered layers, so the peak is the forward's last layer's copy-out (moments.py): the
    root gathered and three layers' worth (that layer's all-gather output and parameters,
    the previous layer's all-gather output); the trace's 24.98 GB (docs/accuracy.md)."""
    rec = plan(model=str(moe_dirs["qwen3-30b-a3b"]), gpu="H100-80GB", gpu_count=8,
               zero_stage=3, lora_rank=16, micro_batch_size=1,
               activation_checkpointing="none")  # fmt: skip
    act = rec.activations
    peak = act["peak"]
    assert peak["moment"] == "forward"
    assert peak["parts"]["in_flight"] == act["root_gather_bytes"] + 3 * act["layer_gather_bytes"]
    assert peak["parts"]["logits"] == 0
    assert abs(peak["allocated_bytes"] / 24.98e9 - 1) < 0.03
