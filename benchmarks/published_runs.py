"""Published, measured training runs: the data benchmarks/estimate_accuracy.py checks the plan
against. Every measured figure is quoted from the file it came from (repository, path and
the commit read), in the `quote` of its row; nothing here is derived except tokens/s per GPU
where a source gives the total over its GPUs (divided by the GPU count, said in `note`).

Model shapes are config.json-style dicts; `tensors` builds header-only checkpoints with the
exact tensor layout (MPT keeps biases and a learned position table in these benchmarks, so
its counts match the NumParams the source prints).
"""

from __future__ import annotations

from typing import Any, NamedTuple

LLM_FOUNDRY = (
    "mosaicml/llm-foundry", "scripts/train/benchmarking/README.md",
    "061f2c7ce64e655100286584a7629e2a09f827ba",
)  # fmt: skip
TITAN_H100 = (
    "pytorch/torchtitan", "benchmarks/llama3_h100_202412_torchtitan.md",
    "31a17bfdb70bab6f62a13d21816a5339b911d6e3",
)  # fmt: skip
TITAN_A100 = (
    "pytorch/torchtitan", "docs/performance.md", "041336434916bdc0f88c1f89fda176fd3c2092e4",
)  # fmt: skip
# Its presets "for 64 A100 GPUs": seq_len = 8192, compile = false (train_configs/llama3_8b.toml
# at 0011fb905e, torchtitan/models/llama/train_configs/llama3_8b.toml at 08a5a9f389,
# train_configs/llama3_70b.toml at 08e537949f); the 8B's mode = 'selective' with
# selective_ac_option = 'op' at both, which the H100 tables' "selective" is taken to be.
FMS_FSDP = (
    "foundation-model-stack/fms-fsdp", "README.md", "0d319983c4b3b7f7b3b5e2c5e7f746746b6f73a9",
)  # fmt: skip
KEMPNER = (
    "KempnerInstitute/KempnerForge", "benchmarks/mfu_scaling/mfu_scaling_2026-04-05.md",
    "9f3f03a070668192230c7c542a3ecebb22d9a20c",
)  # fmt: skip


def mpt(d_model: int, n_heads: int, n_layers: int, max_seq_len: int) -> dict[str, Any]:
    """An MPT config as llm-foundry's yamls (scripts/train/yamls/pretrain/mpt-*.yaml) give it:
    expansion_ratio 4, vocab 50368, tied embeddings; plus the keys the planner reads."""
    return {
        "model_type": "mpt", "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers,
        "expansion_ratio": 4, "vocab_size": 50368, "max_seq_len": max_seq_len,
        "hidden_size": d_model, "num_attention_heads": n_heads, "num_key_value_heads": n_heads,
        "intermediate_size": 4 * d_model, "tie_word_embeddings": True,
        "max_position_embeddings": max_seq_len,
    }  # fmt: skip


def llama(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int) -> dict[str, Any]:
    """A Llama-style config.json (untied head)."""
    return {
        "model_type": "llama", "hidden_size": h, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": vocab, "tie_word_embeddings": False, "max_position_embeddings": 131072,
    }  # fmt: skip


def mpt_tensors(config: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """MPT's tensors with biases (no_bias false) and learned positions, as the benchmarked
    models had them: the counts equal the NumParams column of the source."""
    h, v = config["d_model"], config["vocab_size"]
    t: dict[str, tuple[str, list[int]]] = {
        "transformer.wte.weight": ("BF16", [v, h]),
        "transformer.wpe.weight": ("BF16", [config["max_seq_len"], h]),
    }
    for i in range(config["n_layers"]):
        p = f"transformer.blocks.{i}."
        for name, shape in (
            ("norm_1.weight", [h]), ("norm_1.bias", [h]),
            ("attn.Wqkv.weight", [3 * h, h]), ("attn.Wqkv.bias", [3 * h]),
            ("attn.out_proj.weight", [h, h]), ("attn.out_proj.bias", [h]),
            ("norm_2.weight", [h]), ("norm_2.bias", [h]),
            ("ffn.up_proj.weight", [4 * h, h]), ("ffn.up_proj.bias", [4 * h]),
            ("ffn.down_proj.weight", [h, 4 * h]), ("ffn.down_proj.bias", [h]),
        ):  # fmt: skip
            t[p + name] = ("BF16", shape)
    t["transformer.norm_f.weight"] = ("BF16", [h])
    t["transformer.norm_f.bias"] = ("BF16", [h])
    return t


SHAPES: dict[str, dict[str, Any]] = {
    # llm-foundry yamls: mpt-760m d1536/h12/L24, mpt-1b d2048/h16/L24, mpt-7b d4096/h32/L32,
    # mpt-13b d5120/h40/L40, mpt-30b d7168/h56/L48; 70b as its NumParams (64,862,437,376).
    "mpt-760m@2048": mpt(1536, 12, 24, 2048),
    "mpt-1b@2048": mpt(2048, 16, 24, 2048),
    "mpt-7b@2048": mpt(4096, 32, 32, 2048),
    "mpt-7b@8192": mpt(4096, 32, 32, 8192),
    "mpt-13b@2048": mpt(5120, 40, 40, 2048),
    "mpt-30b@2048": mpt(7168, 56, 48, 2048),
    "mpt-70b@2048": mpt(8192, 64, 80, 2048),
    # meta-llama/Llama-3.1-8B config.json (torchtitan's llama3 8B is the same shape).
    "llama-3.1-8b": llama(4096, 14336, 32, 32, 8, 128256),
    # meta-llama/Llama-2-7b-hf and Llama-2-70b-hf config.json.
    "llama-2-7b": llama(4096, 11008, 32, 32, 32, 32000),
    "llama-2-70b": llama(8192, 28672, 80, 64, 8, 32000),
    "llama-3.1-70b": llama(8192, 28672, 80, 64, 8, 128256),
    # KempnerForge "13B": dim 5120, 40 layers, 40 heads, 8 kv heads, ffn_dim_multiplier 1.3
    # (multiple of 256 -> 17920), vocab 128256 untied: 14.84B as its table says.
    "kempner-13b": llama(5120, 17920, 40, 40, 8, 128256),
}
PUBLISHED_PARAMS = {
    # NumParams as the source prints it (llm-foundry) or its stated size.
    "mpt-760m@2048": 760_470_528, "mpt-1b@2048": 1_315_950_592, "mpt-7b@2048": 6_658_859_008,
    "mpt-7b@8192": 6_684_024_832, "mpt-13b@2048": 12_853_954_560,
    "mpt-30b@2048": 29_975_214_080, "mpt-70b@2048": 64_862_437_376,
    "llama-3.1-8b": 8_030_261_248, "kempner-13b": 14_840_000_000,
    "llama-3.1-70b": 70_553_706_496,
}  # fmt: skip


class Run(NamedTuple):
    """One published measurement and the configuration it ran."""

    id: str
    source: tuple[str, str, str]  # repository, file, commit read
    quote: str  # the row as the source prints it
    shape: str
    gpu: str  # the catalog GPU planned for
    gpu_count: int
    micro_batch_size: int
    grad_acc: int
    seq: int
    checkpointing: str  # "full", "none" or "selective-op" (torchtitan's op-level policy)
    precision: str  # "fp32": fp32 masters, bf16 compute (amp_bf16); "bf16": bf16 params
    zero_stage: int  # FSDP FULL_SHARD = 3; HSDP is planned as stage 3 over one node
    compiled: bool
    tokens_per_s_per_gpu: float
    peak_memory_bytes: float | None = None
    memory_modelled: bool = False  # a configuration the memory model covers
    fit: bool = False  # used to fit the constants (else held out)
    note: str = ""
    hardware: str = ""  # a GPU the source describes (benchmarks/as_ran.py), else the catalog's
    nodes: int = 1  # machines, as the source states them
    internode_gbps: float | None = None  # Gb/s per node as stated; None: one NVSwitch domain


def _mpt(quote: str, gpu: str, shape: str, fit: bool = True, **facts: Any) -> Run:
    """A row of llm-foundry's benchmark tables (Composer, FSDP FULL_SHARD, eager, flash
    attention); columns: Model, SeqLen, #GPUs, GPU, MFU, HFU, Model TFLOP, MicroBatchSize,
    GradAccum, GlobalBatchSize, S/s, T/s, T/s/GPU, GlobalBatchSize (T), Precision, MP Mode,
    Sharding, Activation Checkpointing, CPUOffload, NumParams. `facts`: the Run fields the
    row does not give (note, nodes, internode_gbps)."""
    cells = [c.strip() for c in quote.strip("| ").split("|")]
    return Run(
        id=f"mpt-{cells[0]}-{cells[3]}-seq{cells[1]}-{'ac' if cells[17] == 'True' else 'noac'}",
        source=LLM_FOUNDRY, quote=quote, shape=shape, gpu=gpu, gpu_count=int(cells[2]),
        micro_batch_size=int(cells[7]), grad_acc=int(cells[8]), seq=int(cells[1]),
        checkpointing="full" if cells[17] == "True" else "none",
        precision="fp32" if cells[14] == "amp_bf16" else "bf16", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=float(cells[12]), fit=fit, **facts,
    )  # fmt: skip


H100, A100_80, A100_40 = "H100-80GB", "A100-80GB", "A100-40GB"
RUNS: list[Run] = [
    _mpt("|  760m | 2048 | 8 | h100_80gb | 34.9 | 34.9 |  3.453389E+14 | 24 | 2 | 384 | 246 | 505177 | 63147 | 786432 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 760470528 |", H100, "mpt-760m@2048"),  # noqa: E501
    _mpt("|  1b | 2048 | 8 | h100_80gb | 41.82 | 41.82 |  4.138134E+14 | 14 | 1 | 112 | 177 | 363645 | 45455 | 229376 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1315950592 |", H100, "mpt-1b@2048"),  # noqa: E501
    _mpt("|  7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 |  4.595096E+14 | 6 | 1 | 48 | 41 | 85144 | 10643 | 98304 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |", H100, "mpt-7b@2048"),  # noqa: E501
    _mpt("|  7b | 8192 | 8 | h100_80gb | 37.14 | 49.52 |  3.674893E+14 | 8 | 2 | 128 | 6 | 55481 | 6935 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6684024832 |", H100, "mpt-7b@8192", fit=False),  # noqa: E501
    _mpt("|  13b | 2048 | 8 | h100_80gb | 39.79 | 39.79 |  3.937055E+14 | 2 | 1 | 16 | 18 | 38336 | 4792 | 32768 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 12853954560 |", H100, "mpt-13b@2048"),  # noqa: E501
    _mpt("|  30b | 2048 | 8 | h100_80gb | 38.11 | 50.82 |  3.771361E+14 | 3 | 21 | 504 | 7 | 16022 | 2002 | 1032192 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29975214080 |", H100, "mpt-30b@2048"),  # noqa: E501
    _mpt("|  70b | 2048 | 64 | h100_80gb | 42.57 | 56.76 |  4.212583E+14 | 8 | 4 | 2048 | 32 | 66523 | 1039 | 4194304 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 64862437376 |", H100, "mpt-70b@2048", fit=False, nodes=8, note="8 nodes, the H100 table states no interconnect: planned as one 64-GPU NVSwitch domain"),  # noqa: E501
    _mpt("|  760m | 2048 | 8 | a100_80gb | 56.85 | 56.85 |  1.773749E+14 | 24 | 2 | 384 | 126 | 259472 | 32434 | 786432 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 760470528 |", A100_80, "mpt-760m@2048"),  # noqa: E501
    _mpt("|  1b | 2048 | 8 | a100_80gb | 59.86 | 59.86 |  1.867501E+14 | 14 | 4 | 448 | 80 | 164109 | 20513 | 917504 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1315950592 |", A100_80, "mpt-1b@2048"),  # noqa: E501
    _mpt("|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 |  2.003836E+14 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |", A100_80, "mpt-7b@2048"),  # noqa: E501
    _mpt("|  7b | 8192 | 8 | a100_80gb | 54.47 | 72.62 |  1.699318E+14 | 8 | 2 | 128 | 3 | 25655 | 3206 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6684024832 |", A100_80, "mpt-7b@8192", fit=False),  # noqa: E501
    _mpt("|  13b | 2048 | 8 | a100_80gb | 59.57 | 59.57 |  1.858556E+14 | 2 | 3 | 48 | 8 | 18097 | 2262 | 98304 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 12853954560 |", A100_80, "mpt-13b@2048"),  # noqa: E501
    _mpt("|  30b | 2048 | 8 | a100_80gb | 55.3 | 73.74 |  1.725420E+14 | 3 | 21 | 504 | 3 | 7330 | 916 | 1032192 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29975214080 |", A100_80, "mpt-30b@2048"),  # noqa: E501
    _mpt("|  70b | 2048 | 64 | a100_80gb | 53.33 | 71.1 | 1.663896E+16 | 8 | 4 | 2048 | 12 | 26274 | 410 | 4194304 | bf16 | PURE | FULL_SHARD | True | False | 64862437376 |", A100_80, "mpt-70b@2048", fit=False, nodes=8, internode_gbps=1600.0, note="8 nodes of 8, 1600 Gbps node-node interconnect (the A100 80GB table's header)"),  # noqa: E501
    _mpt("|  7b | 2048 | 8 | a100_40gb | 50.92 | 67.89 |  1.588704E+16 | 12 | 4 | 384 | 14 | 29436 | 3679 | 786432 | bf16 | PURE | FULL_SHARD | True | False | 6658859008 |", A100_40, "mpt-7b@2048", fit=False),  # noqa: E501
    Run(
        id="torchtitan-llama3.1-8b-h100-fsdp2-eager", source=TITAN_H100,
        quote="caption: **Table 1** 1D Parallelism (FSDP). Llama 3.1 8B model. 8 GPUs. Local "
        "batch size 2, global batch size 16. Selective activation checkpointing. row: | FSDP | "
        "5,762 | 82.4 | (TPS/GPU, Memory(GiB))",
        shape="llama-3.1-8b", gpu=H100, gpu_count=8, micro_batch_size=2, grad_acc=1, seq=8192,
        checkpointing="selective-op", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=5762, peak_memory_bytes=82.4 * 2**30, hardware="grand-teton-h100",
        note="H100 with 96 GB HBM2e at 500 W, planned as described (Corrections); seq 8192 and "
        "selective_ac_option 'op' from the llama3_8b.toml preset; memory in GiB",
    ),
    Run(
        id="torchtitan-llama3.1-8b-h100-fsdp2-compiled", source=TITAN_H100,
        quote="caption: as the eager row. row: | FSDP + torch.compile | 6,667 | 77.0 |",
        shape="llama-3.1-8b", gpu=H100, gpu_count=8, micro_batch_size=2, grad_acc=1, seq=8192,
        checkpointing="selective-op", precision="fp32", zero_stage=3, compiled=True,
        tokens_per_s_per_gpu=6667, peak_memory_bytes=77.0 * 2**30, hardware="grand-teton-h100",
        note="as the eager row, with torch.compile",
    ),
    Run(
        id="torchtitan-llama3.1-8b-h100x128-fsdp2-eager", source=TITAN_H100,
        quote="caption: **Table 3** 1D Parallelism (FSDP). Llama 3.1 8B model. 128 GPUs. Local "
        "batch size 2, global batch size 256. Selective activation checkpointing. row: | FSDP | "
        "5,605 | 67.0 |",
        shape="llama-3.1-8b", gpu=H100, gpu_count=128, micro_batch_size=2, grad_acc=1, seq=8192,
        checkpointing="selective-op", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=5605, peak_memory_bytes=67.0 * 2**30, hardware="grand-teton-h100",
        nodes=16, internode_gbps=8 * 400.0,
        note="16 nodes of 8, RDMA 400 Gb/s per GPU; H100 96 GB at 500 W as the eager 8-GPU "
        "row; memory in GiB",
    ),
    Run(
        id="torchtitan-llama3-8b-a100x64-fsdp2-eager", source=TITAN_A100,
        quote="text: ... on Llama 3 models with FSDP2 on 64 A100 (80GB) GPUs. header: | Model "
        "size | Batch size | Activation checkpoiting | WPS | MFU | row: | 8B | 1 | selective op "
        "| 2973 | 58.2% |",
        shape="llama-3.1-8b", gpu=A100_80, gpu_count=64, micro_batch_size=1, grad_acc=1,
        seq=8192, checkpointing="selective-op", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=2973,
        nodes=8,
        note="8 nodes, network not stated: planned as one domain; seq 8192 and compile = false "
        "from the 64-A100 preset; Llama 3 8B has Llama 3.1 8B's shape",
    ),
    Run(
        id="torchtitan-llama3-70b-a100x64-fsdp2-eager", source=TITAN_A100,
        quote="(text and header as above) row: | 70B | 1 | full | 331 | 51.7% |",
        shape="llama-3.1-70b", gpu=A100_80, gpu_count=64, micro_batch_size=1, grad_acc=1,
        seq=8192, checkpointing="full", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=331, nodes=8,
        note="8 nodes, network not stated: planned as one domain; seq 8192 and compile = "
        "false from the 70B preset (which also sets TP 8; the table is FSDP2 only)",
    ),
    Run(
        id="fms-fsdp-llama2-7b-a100x128-hsdp-eager", source=FMS_FSDP,
        quote="| 7b | 128 * A100 | HSDP | False | 2 | **3760 token/gpu/sec** |",
        shape="llama-2-7b", gpu=A100_80, gpu_count=8, micro_batch_size=2, grad_acc=1, seq=4096,
        checkpointing="none", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=3760,
        note="HSDP: sharded within each 8-GPU node, planned as one node of 8; seq 4096 (the "
        "README's 4k context); eager (docs/configurations.md: not to use compile); A100 memory "
        "size not stated, planned as 80 GB",
    ),
    Run(
        id="fms-fsdp-llama2-70b-a100x128-fsdp-eager", source=FMS_FSDP,
        quote="| 70b | 128 * A100 | FSDP | True | 6 | **380 token/gpu/sec** |",
        shape="llama-2-70b", gpu=A100_80, gpu_count=128, micro_batch_size=6, grad_acc=1,
        seq=4096, checkpointing="full", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=380, nodes=16,
        note="16 nodes, network not stated: planned as one domain; seq 4096 as above",
    ),
    Run(
        id="kempnerforge-13b-h200x8-fsdp2-eager", source=KEMPNER,
        quote="row: | 8 | 8 | 2 | 13B | FSDP=8 | 35,405 | **44.4** | 88.5 GB | 14.81s | batch: "
        "| 13B | 4 | 4 | 65,536 | text: All experiments used `seq_len=4096` with "
        "`torch.compile=true` (except experiment 08 which used `compile=false`).",
        shape="kempner-13b", gpu="H200-141GB", gpu_count=8, micro_batch_size=4, grad_acc=4,
        seq=4096, checkpointing="full", precision="fp32", zero_stage=3, compiled=False,
        tokens_per_s_per_gpu=35405 / 8, peak_memory_bytes=88.5e9, nodes=2, internode_gbps=400.0,
        note="2 nodes of 4, InfiniBand at the planner's default rate (the report gives none); "
        "35,405 tok/s over 8 GPUs; header: activation checkpointing (full); master-weight "
        "precision not stated",
    ),
    Run(
        id="kempnerforge-7b-h200x1-compiled", source=KEMPNER,
        quote="row: | 1 | 1 | 1 | 7B | — | 10,471 | **57.8** | 80.7 GB | 3.13s | batch: | 7B | "
        "4 | 2 | 32,768 | (seq_len 4096, torch.compile, full AC as above)",
        shape="llama-3.1-8b", gpu="H200-141GB", gpu_count=1, micro_batch_size=4, grad_acc=2,
        seq=4096, checkpointing="full", precision="bf16", zero_stage=0, compiled=True,
        tokens_per_s_per_gpu=10471, peak_memory_bytes=80.7e9,
        note="one GPU: 80.7 GB rules out fp32 masters (128 GB), so planned as bf16",
    ),
    Run(
        id="kempnerforge-7b-h200x4-fsdp2-compiled", source=KEMPNER,
        quote="row: | 4 | 4 | 1 | 7B | FSDP=4 | 38,983 | **53.8** | 61.1 GB | 3.36s | (batch, "
        "seq_len, compile and AC as above)",
        shape="llama-3.1-8b", gpu="H200-141GB", gpu_count=4, micro_batch_size=4, grad_acc=2,
        seq=4096, checkpointing="full", precision="fp32", zero_stage=3, compiled=True,
        tokens_per_s_per_gpu=38983 / 4, peak_memory_bytes=61.1e9,
        note="38,983 tok/s over 4 GPUs; master-weight precision not stated",
    ),
]  # fmt: skip


def compile_speedup() -> float:
    """compiled / eager tokens/s of the one same-configuration pair (torchtitan Table 1)."""
    by = {run.id: run.tokens_per_s_per_gpu for run in RUNS}
    return (
        by["torchtitan-llama3.1-8b-h100-fsdp2-compiled"]
        / by["torchtitan-llama3.1-8b-h100-fsdp2-eager"]
    )
