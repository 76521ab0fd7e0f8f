"""GPU catalog: memory, dense bf16 peak and interconnect for the GPU names the seed uses.

Memory is in decimal bytes, as the names say (L4-24GB = 24e9 bytes). The bus bandwidth is
the nccl-tests "busbw" of an all-reduce across the GPUs of one node, so that a collective of
S bytes on n GPUs takes S * 2(n-1)/n / busbw (all-reduce) or S * (n-1)/n / busbw
(all-gather, reduce-scatter). Sources for every figure are listed in docs/planning.md.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from veri_tui.errors import Refusal, VeriError

# CUDA context, NCCL buffers and allocator slack are kept out of the budget (contracts s.3).
RESERVE_BYTES = 2 * 1024**3
# Share of the memory left after the reserve that model states may take; the other 30% is
# headroom for activations, the in-flight all-gathers and fragmentation.
BUDGET_FRACTION_NUM, BUDGET_FRACTION_DEN = 7, 10


class GPU(NamedTuple):
    """One GPU type: what the planner needs to budget memory and estimate step time
    (immutable; a NamedTuple because it is cheaper to define than a dataclass)."""

    name: str
    memory_bytes: int
    bf16_dense_tflops: float | None  # None for a custom GPU given only by memory size
    interconnect: str  # "pcie" (no peer-to-peer), "nvlink" or "nvswitch"
    busbw_gbps: float  # all-reduce bus bandwidth within a node, GB/s (1e9 bytes)
    latency_us: float  # per-collective launch + sync latency

    @property
    def budget_bytes(self) -> int:
        """0.70 x (memory - 2 GiB), exact integer (floor)."""
        usable = max(0, self.memory_bytes - RESERVE_BYTES)
        return usable * BUDGET_FRACTION_NUM // BUDGET_FRACTION_DEN

    @property
    def usable_bytes(self) -> int:
        """Memory after the 2 GiB reserve: what states, activations and buffers share."""
        return max(0, self.memory_bytes - RESERVE_BYTES)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with the derived budget."""
        d = self._asdict()
        d["budget_bytes"] = self.budget_bytes
        return d


# PCIe parts on cloud nodes (AWS g6 = L4, g5 = A10G) have no peer-to-peer path: NCCL moves
# data through host memory, so the busbw is well under the PCIe Gen4 x16 link rate (32 GB/s).
_PCIE_NO_P2P_BUSBW = 12.0
GPU_CATALOG: dict[str, GPU] = {
    # NVIDIA L4 datasheet: 242 TFLOPS bf16 with sparsity -> 121 dense.
    "L4-24GB": GPU("L4-24GB", 24 * 10**9, 121.0, "pcie", _PCIE_NO_P2P_BUSBW, 30.0),
    # A10G (AWS g5): ~70 TFLOPS dense bf16 (NVIDIA A10G figures as published by AWS/NVIDIA).
    "A10G-24GB": GPU("A10G-24GB", 24 * 10**9, 70.0, "pcie", _PCIE_NO_P2P_BUSBW, 30.0),
    # A100 SXM datasheet: 312 TFLOPS dense bf16; NVLink3 600 GB/s; nccl-tests ~235 GB/s busbw.
    "A100-40GB": GPU("A100-40GB", 40 * 10**9, 312.0, "nvlink", 235.0, 15.0),
    "A100-80GB": GPU("A100-80GB", 80 * 10**9, 312.0, "nvlink", 235.0, 15.0),
    # H100 SXM datasheet: 1979 TFLOPS bf16 with sparsity -> 989 dense; NVSwitch, NVLink4
    # 900 GB/s; nccl-tests all-reduce busbw on 8 GPUs ~360-450 GB/s: we use 400.
    "H100-80GB": GPU("H100-80GB", 80 * 10**9, 989.0, "nvswitch", 400.0, 15.0),
    # H200 datasheet: same compute as H100 SXM (989 dense bf16), 141 GB HBM3e, NVLink4.
    "H200-141GB": GPU("H200-141GB", 141 * 10**9, 989.0, "nvswitch", 400.0, 15.0),
    # B200 (HGX B200 datasheet): 2.25 PFLOPS dense bf16 per GPU; NVLink5 1.8 TB/s.
    "B200-180GB": GPU("B200-180GB", 180 * 10**9, 2250.0, "nvswitch", 700.0, 15.0),
}

# A pattern, not a compiled regex: re compiles it on the first custom name it is asked about.
_CUSTOM = r"^custom-(\d+(?:\.\d+)?)GB$"


def gpus_text(n: int) -> str:
    """`1 GPU`, `4 GPUs`: a count of GPUs in words."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def get_gpu(name: str) -> GPU:
    """Look up a GPU by catalog name, or `custom-<N>GB` for any GPU of N decimal GB.

    A custom GPU has no known peak, so throughput is not estimated for it; it is assumed to
    sit on PCIe without peer-to-peer (the conservative case).
    """
    if name in GPU_CATALOG:
        return GPU_CATALOG[name]
    for known, gpu in GPU_CATALOG.items():
        if known.lower() == name.strip().lower():
            return gpu
    m = re.match(_CUSTOM, name.strip(), re.IGNORECASE)
    if m:
        gb = float(m.group(1))
        if not 1 <= gb <= 10_000:
            raise VeriError(Refusal("gpu", f"{name}: custom memory must be 1-10000 GB"))
        if gb * 10**9 <= RESERVE_BYTES:  # no budget at all: every plan would be "over"
            raise VeriError(Refusal("gpu", (
                f"{name}: {gb:g} GB is all taken by the {RESERVE_BYTES / 1e9:.2f} GB (2 GiB) "
                "reserved per GPU for the CUDA context and communication buffers, leaving "
                "nothing for the model; give the GPU's whole memory (custom-<N>GB above "
                f"{RESERVE_BYTES / 1e9:.2f})")))  # fmt: skip
        label = f"custom-{m.group(1)}GB"
        return GPU(label, int(round(gb * 10**9)), None, "pcie", _PCIE_NO_P2P_BUSBW, 30.0)
    known = ", ".join(GPU_CATALOG)
    raise VeriError(
        Refusal("gpu", f"unknown GPU {name!r}; known: {known}, or custom-<N>GB (e.g. custom-48GB)")
    )
