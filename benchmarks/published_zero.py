"""Published multi-GPU peaks under DeepSpeed ZeRO-2/3 (issue 19: the cases the Qwen
README's single-GPU rows do not reach): ms-swift's benchmark of full fine-tunes and LoRA,
with the DeepSpeed, transformers and peft facts of how those runs held memory. Every quote
as read (benchmarks/published_memory.py gathers them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from published_runs import llama
from published_types import Fact, MemRun, Unexpressed

# The MoE shape the tests' header-only checkpoints also use: written once, in support.synthetic.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.synthetic import QWEN1_5_MOE_A2_7B  # noqa: E402

MEMORY_FACTS: dict[str, Fact] = {}
SHAPES: dict[str, dict[str, Any]] = {}
HEADERS: dict[tuple[str, str, str], str] = {}
RUNS: list[MemRun] = []
NOT_EXPRESSED: list[Unexpressed] = []

SWIFT_BENCH = (
    "modelscope/ms-swift",
    "docs/source/Instruction/Megatron-SWIFT训练.md",
    "088d94a77461f6893741bb9eaa0d179110d1b5e4",
)
SWIFT_SCRIPT = (
    "modelscope/ms-swift",
    "examples/train/megatron/benchmark/deepspeed.sh",
    "7208336012e6ab2aebb42100a662c0b286ae47f8",
)
SWIFT_ZERO3 = ("modelscope/ms-swift", "swift/llm/ds_config/zero3.json",
               "35992c1cc9092af233edbd75a2aefcd496d6fc19")  # fmt: skip
SWIFT_ARGS = ("modelscope/ms-swift", "docs/source/Instruction/命令行参数.md",
              "00cd1290c8b361c65a8fdebe19769aa315893049")  # fmt: skip
DEEPSPEED_ZERO3 = ("microsoft/DeepSpeed", "deepspeed/runtime/zero/stage3.py",
                   "0003660dc804f11976ecbc725585d43774952fab")  # fmt: skip
HF_LOSS = ("huggingface/transformers", "src/transformers/loss/loss_utils.py",
           "0114da07ec0e101b420a923dedeb6032b6ac3a44")  # fmt: skip
PEFT_DS = ("huggingface/peft", "docs/source/accelerate/deepspeed.md",
           "09802c1b43fff9b087be42e149d70e5350ff407a")  # fmt: skip
PEFT_UTILS = ("huggingface/peft", "examples/sft/utils.py",
              "0106572395656923b710306c264596b94d028d05")  # fmt: skip

MEMORY_FACTS["deepspeed-zero3-states"] = Fact(
    DEEPSPEED_ZERO3,
    "def _setup_for_real_optimizer(self): ... self._create_fp32_partitions() ... "
    "self.initialize_optimizer_states() ... if self.contiguous_gradients: "
    "self.__ipg_bucket_flat_buffer: Tensor = torch.empty( self.reduce_bucket_size, "
    "dtype=self.dtype, ...) ... grad_partitions_flat_buffer: Tensor = torch.zeros( "
    "sum(p.ds_tensor.ds_numel for p in all_params), dtype=self.dtype, device=self.device, ...)",
    "DeepSpeed ZeRO-3 in bf16 keeps, per GPU, its shard of the bf16 weights (2 bytes), an fp32 "
    "master shard (4), AdamW's fp32 moments (8) and a bf16 gradient partition (2): 16 bytes "
    "per trainable parameter over the data-parallel ranks, where the knobs' bf16 holds 8 "
    "(fp32 master weights are the knobs' fp32: the same 16 bytes, split 4 + 4 + 8). Its "
    "reduce bucket (reduce_bucket_size elements of bf16; transformers' integration fills "
    "`auto` with hidden_size^2: 52 MB at Qwen2.5-14B's 5120) is left out, as is the fp32 "
    "gradient its step makes of one sub-group at a time (sub_group_size). What it holds "
    "gathered (stage3_max_live_parameters, prefetch) is planned as the plan's units in "
    "flight (the root unit, two layers, one layer's gradient): the parameters DeepSpeed "
    "keeps live are not readable from the run.",
    trainable_bytes=16,
)
MEMORY_FACTS["swift-zero3"] = Fact(
    SWIFT_ZERO3,
    '"bf16": { "enabled": "auto" }, "zero_optimization": { "stage": 3, "offload_optimizer": '
    '{ "device": "none", ... }, "offload_param": { "device": "none", ... }, "overlap_comm": '
    'true, "contiguous_gradients": true, "sub_group_size": 1e9, "reduce_bucket_size": "auto", '
    '... "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9, ...',
    "ms-swift's built-in `--deepspeed zero3`: ZeRO-3 without offload. Its bf16 is `auto`, "
    "filled from the training arguments; that swift sets them to bf16 from the run's "
    "--torch_dtype bfloat16 is ASSUMED (not read here): then DeepSpeed's engine runs the "
    "model in bf16 without autocast. The config as stored here (commit 35992c1cc9) is not "
    "dated against the benchmark's run.",
)
MEMORY_FACTS["swift-defaults"] = Fact(
    SWIFT_ARGS,
    "🔥gradient_checkpointing: 是否使用gradient_checkpointing，默认为True。 ... loss_type: "
    "loss类型。默认为None，使用模型自带损失函数。",
    "ms-swift's defaults, which the benchmark script does not override: gradient "
    "checkpointing on (transformers' per-layer checkpointing: the knobs' `full`) and the "
    "model's own loss (hf-fp32-loss).",
)
MEMORY_FACTS["hf-fp32-loss"] = Fact(
    HF_LOSS,
    "def ForCausalLMLoss( logits, labels, vocab_size: int, ...): # Upcast to float if we need "
    "to compute the loss to avoid potential precision issues logits = logits.float() if "
    "shift_labels is None: # Shift so that tokens < n predict n labels = nn.functional.pad("
    "labels, (0, 1), value=ignore_index) shift_labels = labels[..., 1:].contiguous() ... loss "
    "= fixed_cross_entropy(logits, shift_labels, num_items_in_batch, ignore_index, **kwargs)",
    "transformers' causal-LM loss on the bf16 logits with no autocast (DeepSpeed's bf16): an "
    "fp32 copy of the logits and log_softmax's fp32 output, then three fp32 tensors in "
    "backward (12 bytes per vocabulary entry per token; the labels are shifted, not the "
    "logits); the bf16 logits are dropped with the model's output before backward. The "
    "transformers version each run used is not stated; the loss of releases before this "
    "file is not read here.",
    loss="ce_fp32",
)
MEMORY_FACTS["peft-sft-lora"] = Fact(
    PEFT_DS,
    "--max_seq_len 2048 ... --bf16 True \\ --packing True ... --per_device_train_batch_size 8 "
    "... --gradient_checkpointing True \\ --use_reentrant False ... --use_flash_attn True \\ "
    "--use_peft_lora True \\ --lora_r 8 \\ --lora_alpha 16 \\ --lora_dropout 0.1 \\ "
    '--lora_target_modules "all-linear" \\ --use_4bit_quantization False',
    "peft's SFT example under accelerate's ZeRO-3 (zero_stage: 3, offload_optimizer_device: "
    "none, offload_param_device: none, zero3_init_flag: true, mixed_precision: bf16): LoRA "
    "rank 8 on every linear, each adapter's dropout keeping a bool mask of its input; packed "
    "2048-token samples, 8 per GPU. The frozen base: see deepspeed-zero3-init.",
    lora_dropout=True,
)
DEEPSPEED_INIT = ("microsoft/DeepSpeed", "deepspeed/runtime/zero/partition_parameters.py",
                  "0003660dc804f11976ecbc725585d43774952fab")  # fmt: skip
MEMORY_FACTS["deepspeed-zero3-init"] = Fact(
    DEEPSPEED_INIT,
    "def _set_dtype(self, ds_config, dtype): if ds_config is not None and dtype is None: ... "
    "if ds_config.bfloat16_enabled: self.dtype = torch.bfloat16 ... (class Init: A context to "
    "enable massive model construction for training with ZeRO-3. Models are automatically "
    "partitioned (or, sharded) across the system and converted to half precision.)",
    "zero3_init_flag: true loads the model inside DeepSpeed's zero.Init, which partitions each "
    "weight as it is built, in bf16 when the DeepSpeed config enables bf16: the frozen base "
    "is a 2-byte shard, the knobs' LoRA base, although examples/sft/utils.py asks for "
    "float32 (torch_dtype = ( quant_storage_dtype if quant_storage_dtype and "
    "quant_storage_dtype.is_floating_point else torch.float32 )). ASSUMED, not read here: "
    "transformers enters zero.Init with the run's DeepSpeed config (dtype None); as float32 "
    "the base would add 2 bytes per parameter / 8 GPUs (17.2 GB) to the plan.",
)
SHAPES["qwen2.5-14b"] = {
    "model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 13824,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 32768,
}  # fmt: skip
SHAPES["qwen1.5-moe-a2.7b"] = dict(QWEN1_5_MOE_A2_7B)
SHAPES["llama-2-70b"] = llama(8192, 28672, 80, 64, 8, 32000)
SWIFT_HEADER = (
    "使用`megatron sft`和`swift sft`在单机八卡A800环境下进行Dense/MoE模型全参数训练的速度对比如下，"
    "对应脚本参考[这里](https://github.com/modelscope/ms-swift/tree/main/examples/train/megatron/"
    "benchmark)。"
)
MEMORY_FACTS["swift-bench-script"] = Fact(
    SWIFT_SCRIPT,
    "# 8 * 80GiB ... PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' \\ NPROC_PER_NODE=8 "
    "\\ CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \\ swift sft \\ --model Qwen/Qwen2.5-14B \\ "
    "--train_type full ... --torch_dtype bfloat16 ... --per_device_train_batch_size 1 ... "
    "--gradient_accumulation_steps 2 \\ --packing true ... --max_length 8192 ... "
    "--deepspeed zero2 \\ --attn_impl flash_attn",
    "The benchmark's script (the ZeRO-3 column ASSUMED the same with --deepspeed zero3: the "
    "folder holds this one script): a full fine-tune in bf16, one packed 8192-token "
    "sample per GPU per micro-step, flash-attention 2 (which keeps what the plan's SDPA "
    "keeps: q, k, v, the output and the log-sum-exp), the allocator's expandable segments.",
)
HEADERS[SWIFT_BENCH] = SWIFT_HEADER
_SWIFT_COMMON: dict[str, Any] = {
    "source": SWIFT_BENCH, "gpu": "A100-80GB", "gpu_count": 8, "micro_batch_size": 1,
    "seq": 8192, "checkpointing": "full", "precision": "bf16", "lora_rank": 0,
    "load_in_4bit": False, "measured_as": "device",
}  # fmt: skip
_SWIFT_FACTS = ("swift-bench-script", "deepspeed-zero3-states", "hf-fp32-loss", "swift-defaults")
_SWIFT_NOTE = (
    "A800 planned as the catalog's A100-80GB (the same 80 GB; the peak does not depend on the "
    "GPU); packing fills every sample to --max_length 8192; `显存占用` is not said to be "
    "nvidia-smi's or the allocator's, nor GB or GiB: planned as the device's GB (as GiB the "
    "ratio is 0.93 times this one)"
)
_ZERO2_REASON = (
    "DeepSpeed ZeRO-2 keeps the whole bf16 weights beside an fp32 master partition, AdamW's "
    "partition, a gradient partition and its bucket buffers, a layout the knobs' stage 2 "
    "(FSDP2 without resharding) does not express; planned as ran with ZeRO-3's 16 bytes per "
    "trainable parameter sharded on top of the knobs' whole compute copy"
)
RUNS += [
    MemRun(
        id="swift-qwen2.5-14b-full-zero3-a800x8", shape="qwen2.5-14b", zero_stage=3,
        quote="**Dense** Qwen2.5-14B: | | Megatron-LM | Deepspeed-ZeRO2 | Deepspeed-ZeRO3 | ... "
        "| 显存占用 | 8\\*64GB | 8\\*80GB | 8\\*58GB |",
        measured_bytes=58e9, facts=(*_SWIFT_FACTS, "swift-zero3"), note=_SWIFT_NOTE,
        **_SWIFT_COMMON,
    ),
    MemRun(
        id="swift-qwen2.5-14b-full-zero2-a800x8", shape="qwen2.5-14b", zero_stage=2,
        quote="**Dense** Qwen2.5-14B: ... | 显存占用 | 8\\*64GB | 8\\*80GB | 8\\*58GB | "
        "(Deepspeed-ZeRO2: 8*80GB)",
        measured_bytes=80e9, facts=_SWIFT_FACTS, note=_SWIFT_NOTE, judged=False,
        reason=f"{_ZERO2_REASON}; and 80 GB is the A800's whole memory, so how much of it the "
        "step needed is not known",
        **_SWIFT_COMMON,
    ),
    MemRun(
        id="swift-qwen1.5-moe-a2.7b-full-zero3-a800x8", shape="qwen1.5-moe-a2.7b",
        zero_stage=3,
        quote="**MoE** Qwen1.5-MoE-A2.7B: | | Megatron-LM | Deepspeed-ZeRO2 | Deepspeed-ZeRO3 | "
        "... | 显存占用 | 8\\*66GB | 8\\*72GB | 8\\*50GB |",
        measured_bytes=50e9, facts=(*_SWIFT_FACTS, "swift-zero3"),
        note=f"{_SWIFT_NOTE}. ASSUMED: the benchmark folder holds one script, for Qwen2.5-14B; "
        "the MoE row is planned as that script with the MoE model (the doc points both tables "
        "at it), its knobs not stated for this model",
        **_SWIFT_COMMON,
    ),
    MemRun(
        id="swift-qwen1.5-moe-a2.7b-full-zero2-a800x8", shape="qwen1.5-moe-a2.7b",
        zero_stage=2,
        quote="**MoE** Qwen1.5-MoE-A2.7B: ... | 显存占用 | 8\\*66GB | 8\\*72GB | 8\\*50GB | "
        "(Deepspeed-ZeRO2: 8*72GB)",
        measured_bytes=72e9, facts=_SWIFT_FACTS, judged=False,
        note=f"{_SWIFT_NOTE}. ASSUMED: the dense row's script with the MoE model",
        reason=_ZERO2_REASON, **_SWIFT_COMMON,
    ),
    MemRun(
        id="peft-llama2-70b-lora-zero3-h100x8", source=PEFT_DS, shape="llama-2-70b",
        quote="In the above example, the memory consumed per GPU is 64 GB (80%) as seen in the "
        "screenshot below (Llama-70B model with LoRA and ZeRO-3 on 8xH100 80GB GPUs; "
        '"meta-llama/Llama-2-70b-hf")',
        gpu="H100-80GB", gpu_count=8, micro_batch_size=8, seq=2048, checkpointing="full",
        precision="bf16", lora_rank=8, load_in_4bit=False, zero_stage=3,
        measured_bytes=64e9, measured_as="device",
        facts=("peft-sft-lora", "deepspeed-zero3-init", "deepspeed-zero3-states",
               "hf-fp32-loss"),
        note="the figure is read off a screenshot of the GPU memory (80% of the H100's 80 GB), "
        "two significant figures; flash-attention 2 keeps what the plan's SDPA keeps (q, k, v, "
        "the output and the log-sum-exp); the frozen base planned as bf16 shards (ASSUMED, "
        "deepspeed-zero3-init)",
    ),
]  # fmt: skip

NOT_EXPRESSED += [
    Unexpressed(
        "swift-qwen2.5-14b-full-megatron-a800x8",
        SWIFT_BENCH,
        "**Dense** Qwen2.5-14B: | | Megatron-LM | ... | 显存占用 | 8\\*64GB | ...",
        "8*64 GB",
        "Megatron-LM (megatron sft): Megatron's distributed optimizer and its own model "
        "(TransformerEngine), the script's parallel layout not read",
    ),
    Unexpressed(
        "swift-qwen1.5-moe-a2.7b-full-megatron-a800x8",
        SWIFT_BENCH,
        "**MoE** Qwen1.5-MoE-A2.7B: | | Megatron-LM | ... | 显存占用 | 8\\*66GB | ...",
        "8*66 GB",
        "Megatron-LM, as the dense row",
    ),
]
