"""Each published run planned as it ran, where its source states how that differs from a plain
catalog plan: the GPU the source describes, what selective activation checkpointing
recomputes, and the nodes and network between them (benchmarks/estimate_accuracy.py).

Every correction rests on what its source states, quoted in CORRECTIONS with the file and
commit read; none is fitted. A figure the source leaves open inside a stated fact (the H100's
exact peak, KempnerForge's InfiniBand rate) is an assumption its sentence names. Where a source
does not state a fact at all (the network of most multi-node rows) the run is planned as
before, and docs/accuracy.md says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from published_runs import KEMPNER, LLM_FOUNDRY, TITAN_H100, Run

from veri_tui.plan import get_gpu
from veri_tui.plan.gpus import GPU
from veri_tui.plan.throughput import flops_per_token

# pytorch/torchtitan, the activation checkpointing policy read (parallelize_llama.py).
TITAN_AC = (
    "pytorch/torchtitan", "torchtitan/parallelisms/parallelize_llama.py",
    "004b3148a92b565ef0ce7a7bcc61e0159c7ec930",
)  # fmt: skip
# The dense bf16 peaks the torchtitan footnote brackets, from NVIDIA's H100 product page
# (1,979 and 1,671 TFLOPS "with sparsity", halved): SXM 989.5, NVL 835.5.
H100_SXM_TFLOPS, H100_NVL_TFLOPS = 989.5, 835.5


class Described(NamedTuple):
    """A GPU as a source describes it, for which the catalog has no entry."""

    gpu: GPU
    hbm_gbps: float  # the source's memory bandwidth
    like: str  # the catalog GPU of the same architecture: its fitted matmul efficiency
    bracket: tuple[float, float]  # the dense bf16 peaks the source places its own between


# torchtitan's H100 benchmarks: 96 GB HBM2e at 2.4 TB/s, 500 W; the peak "between SXM and
# NVL", not known: the midpoint. NVLink within the host as the catalog's H100.
GRAND_TETON_H100 = Described(
    get_gpu("H100-80GB")._replace(
        name="H100-96GB-HBM2e-500W", memory_bytes=96 * 10**9,
        bf16_dense_tflops=(H100_SXM_TFLOPS + H100_NVL_TFLOPS) / 2,
    ),
    hbm_gbps=2400.0, like="H100-80GB", bracket=(H100_NVL_TFLOPS, H100_SXM_TFLOPS),
)  # fmt: skip
DESCRIBED = {"grand-teton-h100": GRAND_TETON_H100}


def gpu_for(run: Run) -> GPU:
    """The GPU the run is planned on: the one its source describes, else the catalog's."""
    return DESCRIBED[run.hardware].gpu if run.hardware else get_gpu(run.gpu)


@contextlib.contextmanager
def tables_for(run: Run) -> Iterator[None]:
    """The throughput module's per-GPU tables with the described GPU added for the duration:
    its source's HBM bandwidth and the efficiency in force for its catalog sibling (read at
    entry, so the fit's trial constants apply to it as well)."""
    from veri_tui.plan import throughput

    if not run.hardware:
        yield
        return
    d = DESCRIBED[run.hardware]
    saved = (throughput.MATMUL_EFFICIENCY, throughput.HBM_GBPS)
    eff = saved[0].get(d.like, throughput.DEFAULT_MATMUL_EFFICIENCY)
    throughput.MATMUL_EFFICIENCY = {**saved[0], d.gpu.name: eff}
    throughput.HBM_GBPS = {**saved[1], d.gpu.name: d.hbm_gbps}
    try:
        yield
    finally:
        throughput.MATMUL_EFFICIENCY, throughput.HBM_GBPS = saved


def op_sac_recompute(info: Any, seq: int) -> tuple[float, float]:
    """(share of the forward FLOPs, share of its elementwise passes) that torchtitan's op-level
    selective checkpointing recomputes. Its policy saves the outputs of the ops in `_save_list`
    (mm, the SDPA kernels, reduce-scatter) "except every second mm", counted per layer; every
    other op is recomputed. A Llama layer's mms in forward order are wq, wk, wv, wo, w1, w3,
    w2, so wk, wo and w3 are recomputed; attention is not (SDPA's output is saved), nor the
    head (outside the checkpointed layers); every norm, rotary, SiLU and product is."""
    h, inter = info.hidden_size, info.intermediate_size
    qd = info.num_attention_heads * info.head_dim
    kvd = info.num_key_value_heads * info.head_dim
    mms = [h * qd, h * kvd, h * kvd, qd * h, h * inter, h * inter, inter * h]
    recomputed = 2 * info.layer_count * sum(mms[1::2])  # the 2nd, 4th and 6th
    forward = flops_per_token(info, seq, lora=False, gc=False, dpo=False)["forward"]
    return recomputed / forward, 1.0


def throughput_args(
    run: Run, info: Any, *, as_ran: bool = True, tflops: float | None = None
) -> dict[str, Any]:
    """estimate_throughput's GPU, checkpointing and network arguments for this run: as it ran
    (`tflops`: with that peak instead), or (as_ran=False) as planned before: the catalog GPU,
    selective checkpointing as none, the GPUs as one NVSwitch domain."""
    args: dict[str, Any] = {"gpu": get_gpu(run.gpu), "nodes": 1}
    args["gradient_checkpointing"] = run.checkpointing == "full"
    if not as_ran:
        return args
    args["gpu"] = gpu_for(run)
    if tflops is not None:
        args["gpu"] = args["gpu"]._replace(bf16_dense_tflops=tflops)
    if run.checkpointing == "selective-op":
        args["recompute_fraction"], args["recompute_elementwise"] = op_sac_recompute(info, run.seq)
    if run.internode_gbps:
        args["nodes"], args["internode_gbps"] = run.nodes, run.internode_gbps
    return args


class Correction(NamedTuple):
    """One way a run is planned as it ran, with the source that states it."""

    key: str
    applies: Callable[[Run], bool]
    source: tuple[str, str, str]
    quote: str
    sentence: str


def _across(source: tuple[str, str, str]) -> Callable[[Run], bool]:
    """Rows of this source planned over a network between their nodes."""
    return lambda run: run.source == source and bool(run.internode_gbps)


CORRECTIONS = [
    Correction(
        "hardware",
        lambda r: r.hardware == "grand-teton-h100",
        TITAN_H100,
        "Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak memory bandwidth. ... "
        "We used the default 500W power limit ... [^2]: In our test we used HBM2e-based SXM "
        "H100 with lower TDP, the actual peak TFLOPs number is between SXM and NVL, and we "
        "don't know its exact value.",
        "Planned on the H100 the source describes rather than the catalog's H100-80GB SXM "
        "(989 TF, 3.35 TB/s): HBM 2.4 TB/s as stated; dense bf16 peak "
        f"{GRAND_TETON_H100.gpu.bf16_dense_tflops:g} TF, the midpoint of SXM "
        f"{H100_SXM_TFLOPS:g} and NVL {H100_NVL_TFLOPS:g} (NVIDIA's H100 product page: 1,979 "
        "and 1,671 TFLOPS with sparsity, halved), since the source brackets it there and "
        "knows no exact value; the catalog's NVLink figures and Hopper's fitted matmul "
        "efficiency otherwise.",
    ),
    Correction(
        "selective-op",
        lambda r: r.checkpointing == "selective-op",
        TITAN_AC,
        "_save_list = { torch.ops.aten.mm.default, "
        "torch.ops.aten._scaled_dot_product_efficient_attention.default, "
        "torch.ops.aten._scaled_dot_product_flash_attention.default, "
        "torch.ops._c10d_functional.reduce_scatter_tensor.default, } ... # Saves output of "
        "all compute ops, except every second mm / to_save = func in _save_list and not ( "
        "func == torch.ops.aten.mm.default and meta[mm_count_key] % 2 == 0 )",
        'Selective op checkpointing (the A100 table says "selective op"; the H100 tables '
        "say \"selective\", and the llama3_8b.toml preset sets selective_ac_option = 'op' at "
        "both commits read) is "
        "planned with what that policy recomputes: of each layer's forward mms (wq, wk, wv, "
        "wo, w1, w3, w2) every second one, wk, wo and w3 (attention is saved and the head "
        "is outside the checkpointed layers), and every elementwise op: the share of the "
        "forward FLOPs in the table above and one elementwise pass. Before, it was planned "
        "as no checkpointing.",
    ),
    Correction(
        "network-titan",
        _across(TITAN_H100),
        TITAN_H100,
        "Each host has 8 NVIDIA H100 GPUs fully connected with NVLink. ... Hosts are "
        "inter-connected with backend RDMA network with 400 Gb/s per GPU.",
        "Planned as 16 nodes of 8 GPUs joined by 8 x 400 = 3,200 Gb/s per node (the "
        "planner's hierarchical collectives), not one 128-GPU NVSwitch domain.",
    ),
    Correction(
        "network-foundry",
        _across(LLM_FOUNDRY),
        LLM_FOUNDRY,
        "## A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
        "Planned as 8 nodes of 8 GPUs (the table's one-node rows are 8 GPUs) joined by "
        "1,600 Gb/s per node, not one 64-GPU NVSwitch domain. The H100 table's header states "
        "no interconnect, so its 64-GPU row stays one domain.",
    ),
    Correction(
        "network-kempner",
        _across(KEMPNER),
        KEMPNER,
        "**Hardware**: 8 nodes, 4x NVIDIA H200 (141 GB) per node, NVLink intra-node, "
        "InfiniBand inter-node ... | 8 | 8 | 2 | 13B | FSDP=8 |",
        "Planned as 2 nodes of 4 GPUs over InfiniBand, not one 8-GPU node. The report gives "
        'no rate, so the link is the planner\'s `network = "infiniband"` default, 400 Gb/s '
        "per node (one NDR port): an assumption, not the source's figure.",
    ),
]


def corrections_for(run: Run) -> list[Correction]:
    """The corrections that apply to this run (empty: planned as before)."""
    return [c for c in CORRECTIONS if c.applies(run)]
