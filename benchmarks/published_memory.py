"""Published, measured peak GPU memory of fine-tuning runs: the data benchmarks/
estimate_accuracy.py sets the plan's peak against (docs/accuracy.md, Peak memory).

Every figure is quoted from the file it came from (repository, path, commit read), and so is
every fact of how the run held memory that differs from the bundled trainer (its loss, its
LoRA dropout, its optimizer's layout, its quantisation): `facts` names them, and
MEMORY_FACTS below quotes each. A run whose layout the knobs cannot express (DeepSpeed's
full-parameter buffers, sums over GPUs, torch.compile) is listed with `judged=False` and
the reason; nothing here is fitted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from published_runs import llama

QWEN = ("QwenLM/Qwen", "README.md", "03cd81f5e4da6ab60fc8f97f3b8aa1206fdb08a9")
QWEN_FINETUNE = ("QwenLM/Qwen", "finetune.py", "00dceebbaaec2bf642ad327f7022ac9b6f8da187")
QWEN_DS2 = (
    "QwenLM/Qwen",
    "finetune/ds_config_zero2.json",
    "af22d5e0cec7a7c058a445fcc4cb374de960ad5f",
)
TITAN = ("pytorch/torchtitan", "benchmarks/llama3_h100_202412_torchtitan.md",
         "31a17bfdb70bab6f62a13d21816a5339b911d6e3")  # fmt: skip
TITAN_TRAIN = ("pytorch/torchtitan", "train.py", "0011fb905e9561a51af0f265e35d989f7448b1d8")
TORCHTUNE = ("pytorch/torchtune", "README.md", "0031bfb080bd35ec533c412df883cf2bf7bf7fe4")
LITGPT = ("Lightning-AI/litgpt", "tutorials/resource-tables.md",
          "4839345a97a0a90bc5f2361664b04d665c9a0e89")  # fmt: skip


def qwen(h: int, mlp: int, layers: int, heads: int, vocab: int) -> dict[str, Any]:
    """A Qwen (v1) model as a Llama-shaped config: its config.json's intermediate_size is
    twice the MLP width (w1 and w2 each take half), wte and lm_head are untied."""
    return {**llama(h, mlp, layers, heads, heads, vocab), "max_position_embeddings": 8192}


def qwen_tensors(config: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Qwen's tensors under Llama names, q, k, v fused as one linear (its c_attn): the LoRA
    adapter then counts what peft adds to c_attn, c_proj, w1, w2 and the MLP's c_proj."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [v, h])}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        for name, shape in (
            ("input_layernorm.weight", [h]), ("self_attn.qkv_proj.weight", [3 * h, h]),
            ("self_attn.qkv_proj.bias", [3 * h]), ("self_attn.o_proj.weight", [h, h]),
            ("post_attention_layernorm.weight", [h]), ("mlp.gate_proj.weight", [i, h]),
            ("mlp.up_proj.weight", [i, h]), ("mlp.down_proj.weight", [h, i]),
        ):  # fmt: skip
            t[p + name] = ("BF16", shape)
    t["model.norm.weight"] = ("BF16", [h])
    t["lm_head.weight"] = ("BF16", [v, h])
    return t


# Qwen/Qwen-1_8B, Qwen-7B, Qwen-14B config.json: hidden_size, intermediate_size / 2,
# num_hidden_layers, num_attention_heads, vocab_size.
SHAPES = {
    "qwen-1.8b": qwen(2048, 5504, 24, 16, 151936),
    "qwen-7b": qwen(4096, 11008, 32, 32, 151936),
    "qwen-14b": qwen(5120, 13696, 40, 40, 152064),
}


class MemRun(NamedTuple):
    """One published peak and the configuration it ran."""

    id: str
    source: tuple[str, str, str]
    quote: str
    shape: str
    gpu: str
    gpu_count: int
    micro_batch_size: int
    seq: int
    checkpointing: str  # none | selective | full
    precision: str
    lora_rank: int
    load_in_4bit: bool
    zero_stage: int
    measured_bytes: float
    measured_as: str  # "device" (the process's, as nvidia-smi shows), "reserved", "allocated"
    facts: tuple[str, ...] = ()  # keys of MEMORY_FACTS: how the run differs from ours
    judged: bool = True
    reason: str = ""  # why not judged
    note: str = ""
    cpu_offload: bool = False


SEQS = (256, 512, 1024, 2048, 4096, 8192)
QWEN_HEADER = (
    "We profile the GPU memory and training speed of both LoRA ... and Q-LoRA in the setup "
    "of single-GPU training. In this test, we experiment on a single A100-SXM4-80G GPU ... "
    "We uniformly use a batch size of 1 and gradient accumulation of 8. We profile the "
    "memory (GB) and speed (s/iter) of inputs of different lengths, namely 256, 512, 1024, "
    "2048, 4096, and 8192."
)
# (model, method as the table names it, the row's cells), as README.md prints them.
QWEN_ROWS = [
    ("qwen-1.8b", "LoRA", "6.7G / 1.0s/it | 7.4G / 1.0s/it | 8.4G / 1.1s/it | 11.0G / 1.7s/it | 16.2G / 3.3s/it | 21.8G / 6.8s/it"),  # noqa: E501
    ("qwen-1.8b", "Q-LoRA", "5.8G / 1.4s/it | 6.0G / 1.4s/it | 6.6G / 1.4s/it | 7.8G / 2.0s/it | 10.2G / 3.4s/it | 15.8G / 6.5s/it"),  # noqa: E501
    ("qwen-1.8b", "Full-parameter", "43.5G / 2.1s/it | 43.5G / 2.2s/it | 43.5G / 2.2s/it | 43.5G / 2.3s/it | 47.1G / 2.8s/it | 48.3G / 5.6s/it"),  # noqa: E501
    ("qwen-7b", "LoRA", "20.1G / 1.2s/it | 20.4G / 1.5s/it | 21.5G / 2.8s/it | 23.8G / 5.2s/it | 29.7G / 10.1s/it | 36.6G / 21.3s/it"),  # noqa: E501
    ("qwen-7b", "Q-LoRA", "11.5G / 3.0s/it | 11.5G / 3.0s/it | 12.3G / 3.5s/it | 13.9G / 7.0s/it | 16.9G / 11.6s/it | 23.5G / 22.3s/it"),  # noqa: E501
    ("qwen-14b", "LoRA", "34.6G / 1.6s/it | 35.1G / 2.4s/it | 35.3G / 4.4s/it | 37.4G / 8.4s/it | 42.5G / 17.0s/it | 55.2G / 36.0s/it"),  # noqa: E501
    ("qwen-14b", "Q-LoRA", "18.7G / 5.3s/it | 18.4G / 6.3s/it | 18.9G / 8.2s/it | 19.9G / 11.8s/it | 23.0G / 20.1s/it | 27.9G / 38.3s/it"),  # noqa: E501
]  # fmt: skip


def _qwen_runs() -> list[MemRun]:
    out = []
    for shape, method, cells in QWEN_ROWS:
        for seq, cell in zip(SEQS, cells.split(" | "), strict=True):
            gb = float(cell.split("G")[0])
            common = {
                "source": QWEN, "shape": shape, "gpu": "A100-80GB", "gpu_count": 1,
                "micro_batch_size": 1, "seq": seq, "checkpointing": "full", "zero_stage": 0,
                "measured_bytes": gb * 1e9, "measured_as": "device",
                "quote": f"row: {shape} {method}, column {seq}: {cell}",
            }  # fmt: skip
            if method == "LoRA":
                out.append(MemRun(id=f"qwen-{shape[5:]}-lora-{seq}", precision="bf16",
                                  lora_rank=64, load_in_4bit=False, **common,
                                  facts=("qwen-lora", "hf-autocast-loss")))  # fmt: skip
            elif method == "Q-LoRA":
                out.append(MemRun(id=f"qwen-{shape[5:]}-qlora-{seq}", precision="bf16",
                                  lora_rank=64, load_in_4bit=True, **common,
                                  facts=("qwen-lora", "qwen-qlora", "half-loss")))  # fmt: skip
            else:
                out.append(MemRun(
                    id=f"qwen-{shape[5:]}-full-{seq}", precision="fp32", lora_rank=0,
                    load_in_4bit=False, **common, judged=False,
                    reason="DeepSpeed ZeRO-2 (finetune_ds.sh) keeps an fp32 gradient partition "
                    "and bucket buffers beside the fp32 masters, a layout the knobs (FSDP2, "
                    "DDP) do not express",
                ))  # fmt: skip
    return out


RUNS: list[MemRun] = _qwen_runs()
# What a source's table says of all its rows, quoted once (docs/accuracy.md, Sources).
HEADERS = {QWEN: QWEN_HEADER}


class Fact(NamedTuple):
    """How a published run held memory unlike the bundled trainer, as its source states."""

    source: tuple[str, str, str] | str  # (repository, file, commit) or a URL
    quote: str
    sentence: str
    loss: str | None = None  # veri_tui.plan.activation_peak.LOSSES key
    lora_dropout: bool = False
    trainable_bytes: int | None = None  # per trainable parameter, as its optimizer holds them
    extra_bytes: float = 0.0  # buffers beside the states (DeepSpeed's gradient buckets)
    quant_bytes_per_param: float | None = None  # the 4-bit format of the adapted linears


DEEPSPEED_ZERO = ("microsoft/DeepSpeed", "deepspeed/runtime/zero/stage_1_and_2.py",
                  "022f223697296f182f1b677d83d41a4abb062b0b")  # fmt: skip
AUTOCAST_OPS = "https://pytorch.org/docs/2.1/_sources/amp.rst.txt"
MEMORY_FACTS: dict[str, Fact] = {
    "qwen-lora": Fact(
        QWEN_FINETUNE,
        "lora_r: int = 64 / lora_alpha: int = 16 / lora_dropout: float = 0.05 / "
        'lora_target_modules: List[str] = field(default_factory=lambda: ["c_attn", "c_proj", '
        '"w1", "w2"])',
        "LoRA rank 64 on every linear of the layers (c_attn, Qwen's fused q/k/v, as one), each "
        "adapter's dropout keeping a bool mask of its input; the adapters in the base's bf16 "
        "(the README's peft predates `autocast_adapter_dtype`, peft 0.12, which upcasts them to "
        "fp32): 8 bytes per adapter parameter where the knobs' fp32 adapters hold 16.",
        lora_dropout=True,
        trainable_bytes=8,
    ),
    "hf-autocast-loss": Fact(
        AUTOCAST_OPS,
        "CUDA Ops that can autocast to float32 ... cross_entropy ... log_softmax ... nll_loss",
        "The loss is transformers' shifted CrossEntropyLoss over the model's logits "
        "(Qwen's modeling_qwen.py on the Hub: shift_logits = lm_logits[..., :-1, :]"
        ".contiguous(); CrossEntropyLoss()(shift_logits.view(-1, ...)), not readable here), "
        "run by HF Trainer under bf16 autocast (--bf16 True), which casts cross_entropy's input "
        "to fp32: the fp32 copy and log_softmax's fp32 output, then three fp32 tensors in "
        "backward (12 bytes per vocabulary entry per token) where the bundled trainer's chunked "
        "loss holds 4 and one chunk.",
        loss="ce_autocast_shifted",
    ),
    "qwen-qlora": Fact(
        QWEN_DS2,
        '"zero_optimization": { "stage": 2, "offload_optimizer": { "device": "none" ... }, '
        '"overlap_comm": true, "reduce_scatter": true, "reduce_bucket_size": 2e8, '
        '"contiguous_gradients": true } (finetune_qlora_single_gpu.sh: --fp16 True ... --q_lora '
        "--deepspeed finetune/ds_config_zero2.json; DeepSpeed's backward: buf_0 = torch.empty("
        "int(self.reduce_bucket_size), dtype=self.dtype ...) # Use double buffers ... if "
        "self.overlap_comm: buf_1 = ...)",
        "The GPTQ int4 chat model (Qwen-*-Chat-Int4: 4-bit weights, an fp16 scale and a 4-bit "
        "zero per group of 128: 0.5195 byte per weight, 0.7% more than NF4's 0.5159) under "
        "DeepSpeed ZeRO-2 in fp16 on one GPU: the adapters in fp16 with an fp32 master and fp32 "
        "moments (16 bytes per adapter parameter, as the knobs' fp32 adapters), and two fp16 "
        "gradient buckets of reduce_bucket_size (0.8 GB) beside them; fp16 throughout, no "
        "autocast.",
        trainable_bytes=16,
        extra_bytes=2 * 2e8 * 2,
        quant_bytes_per_param=0.5 + 2 / 128 + 0.5 / 128,
    ),
    "half-loss": Fact(
        QWEN_DS2,
        '"fp16": { "enabled": "auto" ... }',
        "The shifted CrossEntropyLoss on the fp16 logits (no autocast under DeepSpeed's fp16): "
        "log_softmax keeps its fp16 output, backward writes two fp16 gradients (6 bytes per "
        "vocabulary entry per token).",
        loss="ce_shifted_half",
    ),
}
MEMORY_FACTS["titan-loss-as-read"] = Fact(
    TITAN_TRAIN,
    "def loss_fn(pred, labels): return torch.nn.functional.cross_entropy( pred.flatten(0, 1), "
    "labels.flatten(0, 1) ) ... pred = model(input_ids) loss = loss_fn(pred, labels) # need to "
    "free to before bwd to avoid peaking memory del pred loss.backward() ... memory: "
    "{gpu_mem_stats.max_reserved_gib:5.2f}GiB",
    "torchtitan's loss on the bf16 logits, dropped before backward, as train.py reads at "
    "0011fb905e; the benchmark ran torchtitan 9dec370 (2024-12-26), not readable here. Its "
    "memory is the allocator's peak reserve.",
    loss="ce_bf16",
)
TITAN_CAPTION = (
    "caption: **Table {n}** 1D Parallelism (FSDP). Llama 3.1 8B model. {gpus} GPUs. Local batch "
    "size 2, global batch size {gbs}. Selective activation checkpointing. row: | FSDP | {tps} | "
    "{mem} | (TPS/GPU, Memory(GiB))"
)
SHAPES["llama-3.1-8b"] = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "tie_word_embeddings": False, "max_position_embeddings": 131072,
}  # fmt: skip
RUNS += [
    MemRun(
        id=f"torchtitan-llama3.1-8b-h100x{gpus}-fsdp2-eager", source=TITAN,
        quote=TITAN_CAPTION.format(n=n, gpus=gpus, gbs=2 * gpus, tps=tps, mem=mem),
        shape="llama-3.1-8b", gpu="H100-80GB", gpu_count=gpus, micro_batch_size=2, seq=8192,
        checkpointing="selective", precision="fp32", lora_rank=0, load_in_4bit=False,
        zero_stage=3, measured_bytes=mem * 2**30, measured_as="reserved",
        facts=("titan-loss-as-read",), judged=False,
        reason="the loss at the benchmark's commit (9dec370) is not readable here and decides "
        "18% of the peak: train.py at 0011fb905e computes cross_entropy on the bf16 logits "
        "(`ce_bf16`, planned), later torchtitan casts them to fp32 first (`ce_fp32`)",
        note="selective = torchtitan's op policy (the bundled trainer's); seq 8192 from the "
        "llama3_8b.toml preset; fp32 masters with bf16 FSDP2 compute; 96 GB H100s",
    )
    for n, gpus, tps, mem in ((1, 8, "5,762", 82.4), (3, 128, "5,605", 67.0))
]  # fmt: skip


class Unexpressed(NamedTuple):
    """A published peak the knobs cannot express, and why."""

    id: str
    source: tuple[str, str, str]
    quote: str
    measured: str
    reason: str
    kind: str = "Not expressible"  # or "Not judged": expressible, but not as it ran


NOT_EXPRESSED = [
    Unexpressed(
        "torchtitan-llama3.1-8b-h100-fsdp2-compiled",
        TITAN,
        "| FSDP + torch.compile | 6,667 | 77.0 | (Table 1)",
        "77.0 GiB",
        "torch.compile fuses elementwise ops and its partitioner chooses what to save: the "
        "bundled trainer runs eager",
    ),
    Unexpressed(
        "torchtune-llama3.1-8b-lora-4090",
        TORCHTUNE,
        "all the below numbers are provided for batch size 2 (without gradient accumulation), a "
        "dataset packed to sequence length 2048, and torch compile enabled. ... | Llama 3.1 8B | "
        "LoRA | 1x 4090 |  16.2 GiB | 3083 |",
        "16.2 GiB",
        "torch.compile (as above); torchtune's own model and chunked loss",
    ),
    Unexpressed(
        "torchtune-llama3.1-8b-qlora-4090",
        TORCHTUNE,
        "| Llama 3.1 8B | QLoRA | 1x 4090 | 7.4 GiB | 2413  | (batch 2, packed 2048, compile)",
        "7.4 GiB",
        "torch.compile; torchao's NF4 tensors (not bitsandbytes), LoRA on q, v and "
        "output_proj with the MLP",
    ),
    Unexpressed(
        "torchtune-llama3.1-8b-full-4090",
        TORCHTUNE,
        "| Llama 3.1 8B | Full finetune | 1x 4090 | 18.9 GiB | 1650 | (batch 2, packed 2048, "
        "compile)",
        "18.9 GiB",
        "torch.compile; bitsandbytes' paged 8-bit AdamW fused into backward (the knobs run "
        "AdamW, 8 bytes/param in bf16)",
    ),
    Unexpressed(
        "torchtune-llama3.1-70b-full-a100x8-offload",
        TORCHTUNE,
        "| Llama 3.1 70B | Full finetune | 8x A100  | 13.9 GiB ** | 1568  | **= Uses CPU "
        "offload with fused optimizer",
        "13.9 GiB",
        "torch.compile; the optimizer fused into backward, so no whole gradient exists at once",
    ),
    Unexpressed(
        "litgpt-llama2-7b-lora-a100-40gb",
        LITGPT,
        "| 7 B   | Llama 2        | None         | 1               | 4,194,304            | "
        "21.30 GB    | 2.36 min           | (Hardware: NVIDIA A100-SXM4-40GB; "
        "--precision bf16-true)",
        "21.30 GB",
        "LitGPT's own GPT (not transformers): LoRA on q and v only, through one adapter on its "
        "fused qkv; the knobs adapt every linear",
    ),
    Unexpressed(
        "litgpt-llama2-7b-qlora-nf4-dq-a100-40gb",
        LITGPT,
        "| 7 B   | Llama 2        | bnb.nf4-dq   | 1               | 4,194,304            | "
        "13.84 GB    | 3.83 min           |",
        "13.84 GB",
        "as the LoRA row (LitGPT's model, q/v "
        "only); its NF4 with double quantisation is load_in_4bit's format",
    ),
    Unexpressed(
        "qwen-7b-full-a100x2",
        QWEN,
        "7B | Full-parameter | 1 | 2 | 139.2G / 4.0s/it | 148.0G / 4.0s/it | 162.0G / 4.5s/it | "
        "(statistics of full-parameter finetuning with Qwen-7B on 2 A100 GPUs)",
        "139.2-162.0 G",
        "more than one 80 GB GPU holds: a sum over the 2 GPUs or host memory, the README does "
        "not say; DeepSpeed ZeRO-2 or ZeRO-3 layout",
    ),
    Unexpressed(
        "qwen-72b-lora-zero3-a100x4",
        QWEN,
        "72B | LoRA + Deepspeed Zero3 | 1 | 4 | 215.4G / 17.6s/it | ... | 289.2G / 161.5s/it",
        "215.4-289.2 G",
        "a sum over 4 GPUs (more than 80 GB each); DeepSpeed ZeRO-3",
    ),
]

# --- Multi-GPU full fine-tunes under DeepSpeed ZeRO-2/3 and LoRA under ZeRO-3 (issue 19: the
# cases the Qwen README's single-GPU rows do not reach). Every quote below as read.
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
PEFT_FSDP = ("huggingface/peft", "docs/source/accelerate/fsdp.md",
             "018ca9d6f6dc9e77c7e458af816bd27681f7874d")  # fmt: skip
PEFT_UTILS = ("huggingface/peft", "examples/sft/utils.py",
              "0106572395656923b710306c264596b94d028d05")  # fmt: skip
CHATGLM3_FT = ("THUDM/ChatGLM3", "finetune_demo/README.md",
               "07e8993a888a472a327b579b8c50fe624834182c")  # fmt: skip
GLM4_FT = ("THUDM/GLM-4", "finetune_demo/README_en.md",
           "081f0fb96c4cfa6390797c2e214282e1533c9738")  # fmt: skip

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
SHAPES["qwen1.5-moe-a2.7b"] = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 8192,
}  # fmt: skip
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
    Unexpressed(
        "peft-llama2-70b-lora-fsdp-h100x8",
        PEFT_FSDP,
        "In the above example, the memory consumed per GPU is 72-80 GB (90-98%) as seen in the "
        "screenshot below. (fsdp_offload_params: false, mixed_precision: bf16, "
        "--per_device_train_batch_size 8, --max_seq_len 2048, --lora_r 8)",
        "72-80 GB",
        "a range off a chart, rising at the end to save a FULL_STATE_DICT; and FSDP1's mixed "
        "precision keeps the sharded weights as loaded, in float32 (examples/sft/utils.py: "
        "torch_dtype = ... torch.float32), where the knobs hold a LoRA base in bf16",
    ),
    Unexpressed(
        "peft-llama2-70b-qlora-fsdp-offload-2gpu",
        PEFT_FSDP,
        "In the above example, the memory consumed per GPU is **19.6 GB** while CPU RAM usage "
        "is around **107 GB**. When disabling CPU offloading, the GPU memory usage is  **35.6 "
        "GB/ GPU**. (fsdp_offload_params: true, num_processes: 2, --use_4bit_quantization True)",
        "19.6 GB (offload), 35.6 GB (no offload)",
        "QLoRA over FSDP on 2 GPUs: the knobs take load_in_4bit on one GPU only (bitsandbytes "
        "NF4 stored as bf16 words, bnb_4bit_quant_storage_dtype bfloat16, and sharded); the "
        "only published cpu_offload peak found here",
    ),
    Unexpressed(
        "peft-llama2-70b-qlora-zero3-2gpu",
        PEFT_DS,
        "In the above example, the memory consumed per GPU is **36.6 GB**. (zero_stage: 3, "
        "offload_param_device: none, num_processes: 2, --use_4bit_quantization True)",
        "36.6 GB",
        "QLoRA under DeepSpeed ZeRO-3 on 2 GPUs: load_in_4bit is one GPU only in the knobs",
    ),
    Unexpressed(
        "chatglm3-6b-sft-zero3-x4",
        CHATGLM3_FT,
        "SFT 全量微调: 4张显卡平均分配，每张显卡占用 `48346MiB` 显存。 (configs/sft.yaml: "
        "per_device_train_batch_size: 4, max_input_length: 256, max_output_length: 512, "
        "deepspeed: ds_zero_3.json)",
        "48346 MiB",
        "the two stored versions of configs/ds_zero_3.json differ "
        "(3b52b255a1 offloads the optimizer and the parameters to the CPU, b23d105373 does "
        "not) and neither is dated against the README's figure; its bf16 is `auto` while "
        "sft.yaml sets no bf16, and the README casts the trainable weights to fp32 "
        "(_prepare_model_for_training); checkpointing is not read; training and the "
        "generate-based evaluation (predict_with_generate) share the processes (sft.yaml as "
        "read at 0a76162503)",
        "Not judged",
    ),
    Unexpressed(
        "glm-4-9b-sft-zero3-a100x8",
        GLM4_FT,
        "GPU: NVIDIA A100-SXM4-80GB * 8 ... | SFT (Zero3 method) | 80935MiB<br/>(Each GPU, 8 "
        "GPUs are required) | 20G |",
        "80935 MiB",
        "80935 MiB is all but the A100's 81920: the device full, not the step's need; "
        "configs/ds_zero_3.json is not readable here, and finetune.py's evaluation generates "
        "(predict_with_generate, per_device_eval_batch_size 16, max_new_tokens 512) in the "
        "same processes (configs/sft.yaml as read at 0b80c79b8c)",
        "Not judged",
    ),
]

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
