"""Published multi-GPU peaks of ms-swift's LoRA examples: FSDP2 with cpu_offload (the
bundled trainer's own layout), the same job without offload and under ZeRO-3, as each
script's header comment states them. Every quote as read (benchmarks/published_memory.py
gathers them).
"""

from __future__ import annotations

from typing import Any

from published_types import Fact, MemRun, Unexpressed
from published_zero import SWIFT_ARGS

MEMORY_FACTS: dict[str, Fact] = {}
SHAPES: dict[str, dict[str, Any]] = {}
RUNS: list[MemRun] = []
NOT_EXPRESSED: list[Unexpressed] = []

# ms-swift's multi-GPU examples state the memory they ran in as the script's header comment:
# the one FSDP2 cpu_offload figure found (the bundled trainer's own layout), beside the same
# LoRA job without offload and under ZeRO-3. Not judged: a header comment does not say how it
# was measured, and the samples' length is not stated.
SWIFT_FSDP2_OFFLOAD = (
    "modelscope/ms-swift",
    "examples/train/multi-gpu/fsdp2_lora/train_offload.sh",
    "cf66ed1eb34610d8078e4e4bac0a764e39e1ef76",
)
SWIFT_FSDP2 = ("modelscope/ms-swift", "examples/train/multi-gpu/fsdp2_lora/train.sh",
               "61997b4f8eb1c64d79cf7582ef08621ca35e6c79")  # fmt: skip
SWIFT_ZERO3_LORA = ("modelscope/ms-swift", "examples/train/multi-gpu/deepspeed/train_zero3.sh",
                    "30179157717b7442c46b616f9476ccce15e5e59a")  # fmt: skip
SWIFT_FSDP2_OFFLOAD_CFG = ("modelscope/ms-swift", "swift/llm/fsdp_config/fsdp2_offload.json",
                           "cf66ed1eb34610d8078e4e4bac0a764e39e1ef76")  # fmt: skip
SWIFT_SELF_COGNITION = ("modelscope/ms-swift", "swift/llm/data/self_cognition.jsonl",
                        "0dc633cf3f9603eb0852ab404bbbf6a24aff5b06")  # fmt: skip
MEMORY_FACTS["swift-lora-defaults"] = Fact(
    SWIFT_ARGS,
    "- 🔥lora_rank: 默认为`8`。 - 🔥lora_alpha: 默认为`32`。 - lora_dropout: 默认为`0.05`。 ... - "
    "lora_dtype: 指定lora模块的dtype类型。支持'float16'、'bfloat16'、'float32'。"
    "默认为None，跟随原模型类型。",
    "ms-swift's LoRA defaults: each adapter's dropout keeps a bool mask of its input; the "
    "adapters in the model's dtype (bf16 here): 8 bytes per adapter parameter where the "
    "knobs' fp32 adapters hold 16.",
    lora_dropout=True,
    trainable_bytes=8,
)
MEMORY_FACTS["swift-fsdp2-offload"] = Fact(
    SWIFT_FSDP2_OFFLOAD_CFG,
    '"_note": "Use this when GPU memory is limited. Parameters, gradients, and optimizer states '
    'are offloaded to CPU RAM when not in use. ..." ... "fsdp": "full_shard auto_wrap offload", '
    '"fsdp_config": { "fsdp_version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", '
    '"cpu_ram_efficient_loading": true, "state_dict_type": "SHARDED_STATE_DICT", '
    '"activation_checkpointing": true }',
    "`--fsdp fsdp2_offload`: FSDP2 with its CPU offload policy per decoder layer through HF "
    "Trainer, the knobs' cpu_offload (the GPU holds the units in flight); activation "
    "checkpointing per layer, the knobs' `full`.",
)
MEMORY_FACTS["self-cognition-lengths"] = Fact(
    SWIFT_SELF_COGNITION,
    '{"query": "你是？", "response": "我是{{NAME}}，专门设计用于理解自然语言并帮助人们'
    '通过文本交流寻找信息、回答问题、解决问题和探索各种主题。..."} ... '
    '{"query": "please introduce yourself!", "response": '
    '"Hello! I am an AI assistant created by {{AUTHOR}} specifically designed to help people '
    'answer questions, ..."}',
    "The runs' 'swift/self-cognition#1000' (the dataset hub's copy is not readable here; this "
    "file is the repository's copy): one short question and a reply of a few sentences per "
    "sample. ASSUMED: with the system prompt and the chat template every sample fits in 256 "
    "tokens (not tokenized here), so each row is planned at 256 tokens, one sample per "
    "micro-batch; at --max_length 2048 the plan would be higher.",
)
SHAPES["qwen2.5-7b"] = {
    "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}  # fmt: skip
_SWIFT_LORA: dict[str, Any] = {
    "shape": "qwen2.5-7b", "gpu": "A100-80GB", "gpu_count": 2, "micro_batch_size": 1,
    "seq": 256, "precision": "bf16", "lora_rank": 8, "load_in_4bit": False, "zero_stage": 3,
    "measured_as": "device", "judged": False,
}  # fmt: skip
_SWIFT_LORA_REASON = (
    "the figure is the script's header comment, which does not say how it was measured (nor "
    "the GPU: planned on the catalog's A100-80GB, which the peak does not depend on); the "
    "samples' length is not stated (self-cognition-lengths: planned at an ASSUMED 256 tokens)"
)
RUNS += [
    MemRun(
        id="swift-qwen2.5-7b-lora-fsdp2-offload-x2", source=SWIFT_FSDP2_OFFLOAD,
        quote="# FSDP2 LoRA Training with CPU Offload # Similar to DeepSpeed zero3_offload, but "
        "uses PyTorch native FSDP2 # Memory: ~10GiB * 2 GPUs (with CPU offload) ... "
        "nproc_per_node=2 ... --model Qwen/Qwen2.5-7B-Instruct --train_type lora --fsdp "
        "fsdp2_offload --dataset 'swift/self-cognition#1000' --torch_dtype bfloat16 ... "
        "--per_device_train_batch_size 1 ... --lora_rank 8 --lora_alpha 32 "
        "--gradient_checkpointing true ... --target_modules all-linear ... --max_length 2048",
        checkpointing="full", cpu_offload=True, measured_bytes=10 * 2**30,
        facts=("swift-fsdp2-offload", "swift-lora-defaults", "hf-fp32-loss",
               "self-cognition-lengths"),
        reason=f"{_SWIFT_LORA_REASON}; `~10GiB` is approximate",
        note="at 2048 tokens a sample the plan is 0.88 of it, at 128 tokens 0.51: below the "
        "figure at any length the script allows",
        **_SWIFT_LORA,
    ),
    MemRun(
        id="swift-qwen2.5-7b-lora-fsdp2-x2", source=SWIFT_FSDP2,
        quote="# 14.7GiB * 2 nproc_per_node=2 ... accelerate launch --config_file "
        '"./examples/train/multi-gpu/fsdp2_lora/fsdp2.json" swift/cli/sft.py --model '
        "Qwen/Qwen2.5-7B-Instruct --train_type lora --dataset 'swift/self-cognition#1000' "
        "--torch_dtype bfloat16 ... --per_device_train_batch_size 1 ... --lora_rank 8 "
        "--lora_alpha 32 --gradient_checkpointing false ... --target_modules all-linear ... "
        "--max_length 2048",
        checkpointing="none", measured_bytes=14.7 * 2**30,
        facts=("swift-lora-defaults", "hf-fp32-loss", "self-cognition-lengths"),
        reason=f"{_SWIFT_LORA_REASON}; its accelerate config (fsdp2.json in the example's "
        "folder) is not readable here: FSDP2 resharding after forward and no checkpointing "
        "(--gradient_checkpointing false) ASSUMED",
        **_SWIFT_LORA,
    ),
    MemRun(
        id="swift-qwen2.5-7b-lora-zero3-x2", source=SWIFT_ZERO3_LORA,
        quote="# 16GiB * 2 nproc_per_node=2 ... swift sft --model Qwen/Qwen2.5-7B-Instruct "
        "--train_type lora --dataset 'swift/self-cognition#1000' --torch_dtype bfloat16 ... "
        "--per_device_train_batch_size 1 ... --lora_rank 8 --lora_alpha 32 --target_modules "
        "all-linear ... --max_length 2048 ... --deepspeed zero3",
        checkpointing="full", measured_bytes=16 * 2**30,
        facts=("swift-zero3", "swift-defaults", "swift-lora-defaults",
               "deepspeed-zero3-states", "hf-fp32-loss", "self-cognition-lengths"),
        reason=_SWIFT_LORA_REASON,
        **_SWIFT_LORA,
    ),
]  # fmt: skip
