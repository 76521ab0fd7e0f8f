"""Published peaks from single-GPU tables and one FSDP2 benchmark: the Qwen README's
LoRA, Q-LoRA and full rows (one A100-80GB), torchtitan's Llama 3.1 8B FSDP2 runs, and the
rows the knobs cannot express (torch.compile, torchtune's and LitGPT's own models, sums
over GPUs). Every figure and fact quoted as read (benchmarks/published_memory.py).
"""

from __future__ import annotations

from published_types import Fact, MemRun, Unexpressed, qwen

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

# Qwen/Qwen-1_8B, Qwen-7B, Qwen-14B config.json: hidden_size, intermediate_size / 2,
# num_hidden_layers, num_attention_heads, vocab_size.
SHAPES = {
    "qwen-1.8b": qwen(2048, 5504, 24, 16, 151936),
    "qwen-7b": qwen(4096, 11008, 32, 32, 151936),
    "qwen-14b": qwen(5120, 13696, 40, 40, 152064),
}


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
