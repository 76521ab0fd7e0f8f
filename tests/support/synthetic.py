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
