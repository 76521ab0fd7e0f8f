"""Parameter counts from header-only checkpoints match the totals model cards publish."""

from __future__ import annotations

import pytest

from veri_tui.plan.model_info import ModelInfo

# (total, non-embedding) in billions, as published on each model card; None = not published.
PUBLISHED = {
    "qwen3-0.6b": (0.6, 0.44),  # Qwen/Qwen3-0.6B: "0.6B; non-embedding 0.44B"
    "llama-3.1-8b": (8.03, None),  # meta-llama/Llama-3.1-8B: 8.03B (safetensors total)
    "mistral-7b": (7.24, None),  # mistralai/Mistral-7B-v0.1: 7.24B
    "qwen2.5-7b": (7.61, 6.53),  # Qwen/Qwen2.5-7B: 7.61B, non-embedding 6.53B
    "llama-3.1-70b": (70.6, None),  # meta-llama/Llama-3.1-70B: 70.6B
}


def _decimals(x: float) -> int:
    text = repr(x)
    return len(text.split(".")[1]) if "." in text else 0


def _matches(count: int, published: float) -> bool:
    """Equal at the published precision: within one unit of its last digit."""
    unit = 10 ** -_decimals(published)
    return abs(count / 1e9 - published) < unit


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_total_matches_model_card(infos: dict[str, ModelInfo], name: str) -> None:
    total, non_embedding = PUBLISHED[name]
    info = infos[name]
    assert _matches(info.parameter_count, total), info.parameter_count
    if non_embedding is not None:
        # The cards count input embedding and (untied) output head as embedding parameters.
        emb = info.embedding_parameters + info.lm_head_parameters
        assert _matches(info.parameter_count - emb, non_embedding)


def test_exact_counts_from_shapes(infos: dict[str, ModelInfo]) -> None:
    # Exact integers computed by hand from each config (see docs/planning.md).
    assert infos["qwen3-0.6b"].parameter_count == 596_049_920
    assert infos["llama-3.1-8b"].parameter_count == 8_030_261_248
    assert infos["mistral-7b"].parameter_count == 7_241_732_096
    assert infos["qwen2.5-7b"].parameter_count == 7_615_616_512
    assert infos["llama-3.1-70b"].parameter_count == 70_553_706_496


def test_architecture_from_config(infos: dict[str, ModelInfo]) -> None:
    q = infos["qwen3-0.6b"]
    assert (q.layer_count, q.hidden_size, q.num_attention_heads, q.num_key_value_heads) == (
        28,
        1024,
        16,
        8,
    )
    assert q.head_dim == 128 and q.vocab_size == 151936 and q.tied_embeddings
    assert q.lm_head_parameters == 0
    llama = infos["llama-3.1-8b"]
    assert not llama.tied_embeddings and llama.head_dim == 128
    # The root unit (embedding + lm_head + norm) outweighs one decoder layer on Llama-8B.
    assert llama.largest_layer_parameters == 2 * 128256 * 4096 + 4096
    assert llama.files == [f"model-{k:05d}-of-00004.safetensors" for k in range(1, 5)]


def test_lora_targets_are_the_seven_projections(infos: dict[str, ModelInfo]) -> None:
    q = infos["qwen3-0.6b"]
    assert q.lora_target_count == 28 * 7
    assert q.lora_target_modules == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # Per layer: q (1024+2048) k,v (1024+1024) o (2048+1024) gate,up (1024+3072) down (3072+1024)
    per_layer = 3072 + 2 * 2048 + 3072 + 3 * 4096
    assert q.lora_in_out_sum == 28 * per_layer
    assert q.adapter_parameters(16) == 16 * 28 * per_layer
