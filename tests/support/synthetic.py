"""Header-only safetensors checkpoints shaped like public models: test support, also used by
benchmarks/bench_plan.py (moved out of veri_tui.plan: nothing in the product writes them).

The files carry a real header and their full logical size, but the tensor data is a hole
(the file is truncated up to size, so it is sparse): a 70B-shaped checkpoint costs a few
kilobytes of disk. Every header check passes; loading the weights would read zeros.
Architectures are given as config.json dicts (Llama / Mistral / Qwen2 / Qwen3 style).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from veri_tui.plan.headers import DTYPE_BYTES

TensorSpec = tuple[str, list[int]]


def write_header_only(path: Path, tensors: dict[str, TensorSpec]) -> int:
    """Write one sparse safetensors file; returns the parameter count it holds."""
    header: dict[str, object] = {}
    offset = total = 0
    for name, (dtype, shape) in tensors.items():
        numel = math.prod(shape)
        nbytes = DTYPE_BYTES[dtype] * numel
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
        total += numel
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # safetensors pads the header to 8-byte alignment
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + offset)
    return total


def decoder_tensors(config: dict[str, Any], dtype: str = "BF16") -> dict[str, TensorSpec]:
    """Tensor names and shapes of a Llama-style causal LM, as transformers names them."""
    h = config["hidden_size"]
    inter = config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or h // heads
    vocab = config["vocab_size"]
    qkv_bias = config.get("attention_bias", False) or config.get("model_type") == "qwen2"
    qk_norm = config.get("model_type") == "qwen3"
    t: dict[str, TensorSpec] = {"model.embed_tokens.weight": (dtype, [vocab, h])}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (dtype, [h])
        for name, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            t[p + f"self_attn.{name}.weight"] = (dtype, [out, h])
            if qkv_bias:
                t[p + f"self_attn.{name}.bias"] = (dtype, [out])
        t[p + "self_attn.o_proj.weight"] = (dtype, [h, heads * hd])
        if qk_norm:
            t[p + "self_attn.q_norm.weight"] = (dtype, [hd])
            t[p + "self_attn.k_norm.weight"] = (dtype, [hd])
        t[p + "post_attention_layernorm.weight"] = (dtype, [h])
        t[p + "mlp.gate_proj.weight"] = (dtype, [inter, h])
        t[p + "mlp.up_proj.weight"] = (dtype, [inter, h])
        t[p + "mlp.down_proj.weight"] = (dtype, [h, inter])
    t["model.norm.weight"] = (dtype, [h])
    if not config.get("tie_word_embeddings", False):
        t["lm_head.weight"] = (dtype, [vocab, h])
    return t


def add_tokenizer(folder: Path) -> Path:
    """The bundled tiny model's tokenizer files copied into ``folder`` (a header-only
    checkpoint has none, and a launch's preflight refuses a model without a tokenizer)."""
    import shutil

    from veri_tui.bundled import bundled_model

    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy2(bundled_model() / name, folder / name)
    return folder


def write_checkpoint(
    folder: Path,
    config: dict[str, Any],
    *,
    shards: int = 1,
    tensors: dict[str, TensorSpec] | None = None,
) -> int:
    """A folder with config.json and header-only weights (sharded with an index if shards > 1).

    Returns the parameter count written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tensors = tensors if tensors is not None else decoder_tensors(config)
    names = list(tensors)
    if shards <= 1:
        return write_header_only(folder / "model.safetensors", tensors)
    if shards > len(names):
        raise ValueError(f"{shards} shards for {len(names)} tensors")
    weight_map: dict[str, str] = {}
    total = 0
    for k in range(shards):
        # Balanced split: every shard holds at least one tensor.
        part = names[k * len(names) // shards : (k + 1) * len(names) // shards]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        total += write_header_only(folder / fname, {n: tensors[n] for n in part})
        weight_map.update(dict.fromkeys(part, fname))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return total


# config.json values of public checkpoints (the fields the shapes depend on); totals as
# their model cards publish them are checked in tests/plan/test_public_models.py.
QWEN3_0_6B = {
    "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
}  # fmt: skip
LLAMA_3_1_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}  # fmt: skip
MISTRAL_7B_V0_1 = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 32768,
}  # fmt: skip
QWEN2_5_7B = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}  # fmt: skip
LLAMA_3_1_70B = {
    "model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "vocab_size": 128256, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}  # fmt: skip


def _mlp(t: dict[str, TensorSpec], p: str, h: int, inter: int, dtype: str) -> None:
    """A SwiGLU MLP's three projections under prefix `p` (Llama/Qwen/DeepSeek names)."""
    t[p + "gate_proj.weight"] = (dtype, [inter, h])
    t[p + "up_proj.weight"] = (dtype, [inter, h])
    t[p + "down_proj.weight"] = (dtype, [h, inter])


def _attention(config: dict[str, Any], t: dict[str, TensorSpec], p: str, dtype: str) -> None:
    """One layer's attention tensors: standard GQA, or DeepSeek's latent attention (MLA)."""
    h, heads = config["hidden_size"], config["num_attention_heads"]
    mt = config["model_type"]
    if mt.startswith("deepseek"):
        qk = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
        q_lora, kv_lora = config.get("q_lora_rank"), config["kv_lora_rank"]
        if q_lora:
            t[p + "q_a_proj.weight"] = (dtype, [q_lora, h])
            t[p + "q_a_layernorm.weight"] = (dtype, [q_lora])
            t[p + "q_b_proj.weight"] = (dtype, [heads * qk, q_lora])
        else:
            t[p + "q_proj.weight"] = (dtype, [heads * qk, h])
        t[p + "kv_a_proj_with_mqa.weight"] = (dtype, [kv_lora + config["qk_rope_head_dim"], h])
        t[p + "kv_a_layernorm.weight"] = (dtype, [kv_lora])
        kv_out = heads * (config["qk_nope_head_dim"] + config["v_head_dim"])
        t[p + "kv_b_proj.weight"] = (dtype, [kv_out, kv_lora])
        t[p + "o_proj.weight"] = (dtype, [h, heads * config["v_head_dim"]])
        return
    kv = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or h // heads
    bias = mt in ("qwen2_moe", "gpt_oss")
    for name, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
        t[p + f"{name}.weight"] = (dtype, [out, h])
        if bias:
            t[p + f"{name}.bias"] = (dtype, [out])
    t[p + "o_proj.weight"] = (dtype, [h, heads * hd])
    if mt == "gpt_oss":
        t[p + "o_proj.bias"] = (dtype, [h])
        t[p + "sinks"] = (dtype, [heads])
    if mt == "qwen3_moe":
        t[p + "q_norm.weight"] = (dtype, [hd])
        t[p + "k_norm.weight"] = (dtype, [hd])


def _is_moe_layer(config: dict[str, Any], i: int) -> bool:
    mt = config["model_type"]
    if mt.startswith("deepseek"):
        return i >= config.get("first_k_dense_replace", 0)
    if mt.startswith("qwen"):
        step = config.get("decoder_sparse_step", 1)
        return i not in config.get("mlp_only_layers", []) and (i + 1) % step == 0
    return True  # mixtral, gpt_oss: every layer


def _experts(config: dict[str, Any], t: dict[str, TensorSpec], p: str, dtype: str) -> None:
    """One MoE layer's router, routed experts and shared experts, as the checkpoint names them."""
    h, mt = config["hidden_size"], config["model_type"]
    e = config.get("num_experts") or config.get("num_local_experts") or config["n_routed_experts"]
    if mt == "gpt_oss":  # MXFP4: two 4-bit weights per byte, one 8-bit scale per 32
        inter = config["intermediate_size"]
        t[p + "router.weight"] = (dtype, [e, h])
        t[p + "router.bias"] = (dtype, [e])
        for name, out, inn in (("gate_up_proj", 2 * inter, h), ("down_proj", h, inter)):
            t[p + f"experts.{name}_blocks"] = ("U8", [e, out, inn // 32, 16])
            t[p + f"experts.{name}_scales"] = ("U8", [e, out, inn // 32])
            t[p + f"experts.{name}_bias"] = (dtype, [e, out])
        return
    if mt == "mixtral":
        inter = config["intermediate_size"]
        t[p + "gate.weight"] = (dtype, [e, h])
        for k in range(e):
            q = p + f"experts.{k}."
            t[q + "w1.weight"] = (dtype, [inter, h])
            t[q + "w2.weight"] = (dtype, [h, inter])
            t[q + "w3.weight"] = (dtype, [inter, h])
        return
    inter = config["moe_intermediate_size"]
    t[p + "gate.weight"] = (dtype, [e, h])
    if mt == "deepseek_v3":
        t[p + "gate.e_score_correction_bias"] = ("F32", [e])
    for k in range(e):
        _mlp(t, p + f"experts.{k}.", h, inter, dtype)
    if mt == "qwen2_moe":
        _mlp(t, p + "shared_expert.", h, config["shared_expert_intermediate_size"], dtype)
        t[p + "shared_expert_gate.weight"] = (dtype, [1, h])
    if mt.startswith("deepseek"):
        _mlp(t, p + "shared_experts.", h, config["n_shared_experts"] * inter, dtype)


def moe_tensors(config: dict[str, Any], dtype: str = "BF16") -> dict[str, TensorSpec]:
    """Tensor names and shapes of a mixture-of-experts causal LM as its published checkpoint
    names them: qwen3_moe, qwen2_moe, mixtral, deepseek_v2/v3 (latent attention, dense first
    layers, shared experts) and gpt_oss (fused MXFP4 experts)."""
    h, vocab = config["hidden_size"], config["vocab_size"]
    block = "block_sparse_moe." if config["model_type"] == "mixtral" else "mlp."
    t: dict[str, TensorSpec] = {"model.embed_tokens.weight": (dtype, [vocab, h])}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (dtype, [h])
        _attention(config, t, p + "self_attn.", dtype)
        t[p + "post_attention_layernorm.weight"] = (dtype, [h])
        if _is_moe_layer(config, i):
            _experts(config, t, p + block, dtype)
        else:
            _mlp(t, p + "mlp.", h, config["intermediate_size"], dtype)
    t["model.norm.weight"] = (dtype, [h])
    if not config.get("tie_word_embeddings", False):
        t["lm_head.weight"] = (dtype, [vocab, h])
    return t


# Mixture-of-experts configs (config.json values of the public checkpoints); totals and
# active parameters as published are checked in tests/plan/test_moe.py.
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960,
}  # fmt: skip
QWEN1_5_MOE_A2_7B = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 8192,
}  # fmt: skip
MIXTRAL_8X7B = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
    "tie_word_embeddings": False, "max_position_embeddings": 32768,
}  # fmt: skip
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
    "num_experts_per_tok": 6, "first_k_dense_replace": 1, "q_lora_rank": None,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 102400, "tie_word_embeddings": False, "max_position_embeddings": 163840,
}  # fmt: skip
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 129280, "tie_word_embeddings": False, "max_position_embeddings": 163840,
}  # fmt: skip
GPT_OSS_20B = {
    "model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
    "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "num_local_experts": 32, "num_experts_per_tok": 4,
    "experts_per_token": 4, "vocab_size": 201088, "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
}  # fmt: skip
