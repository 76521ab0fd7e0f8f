"""Qwen3-shaped models with random bf16 weights, written like a real checkpoint, for memory tests.

Zero-filled files cost no resident memory when read (field notes), so anything measuring
memory needs random weights: `from_config` initialises them (normal, std 0.02) and
`save_pretrained` writes them. The tokenizer is the bundled tiny model's (its ids fit any
vocabulary here). Used by tests/trainer/test_sharded_load.py and benchmarks/bench_host_memory.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-model"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# Qwen3-0.6B's published dimensions: 596,049,920 parameters with the tied embedding.
QWEN3_06B = {
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
    "rope_theta": 1_000_000.0,
}
# About 30M parameters: big enough that a rank's load shows in VmRSS, small enough for CI.
SMALL = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 32000,
    "tie_word_embeddings": True,
    "max_position_embeddings": 2048,
}
# A few hundred thousand parameters, tied, for tests that train it.
TINY_TIED = {**SMALL, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4}
TINY_TIED.update(num_key_value_heads=2, head_dim=32, vocab_size=1024)


def make_random_model(folder: Path, dims: dict, *, seed: int = 0, shard: str = "5GB") -> Path:
    """Write a random-weight bf16 Qwen3 model to `folder` (kept if already complete)."""
    done = folder / ".complete"
    if done.is_file():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    config = Qwen3Config(**dims, pad_token_id=0, bos_token_id=0, eos_token_id=0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, max_shard_size=shard)
    for name in TOKENIZER_FILES:
        if (TINY / name).is_file():
            shutil.copy(TINY / name, folder / name)
    done.write_text("ok\n")
    return folder


def parameter_count(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files (a tied head is stored once)."""
    import math

    from veri_tui.trainer.weights import checkpoint_entries

    return sum(math.prod(e.shape) for e in checkpoint_entries(folder).values())
