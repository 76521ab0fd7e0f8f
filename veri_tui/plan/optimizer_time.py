"""The optimizer step's seconds: gradient clipping and AdamW's update, on the GPU, or with
cpu_offload on the host (once per optimizer step, after the last micro-batch's backward).

On the GPU each op is dispatched by the host (LAUNCH_S, the figure throughput.py's layer
overhead assumes) and moves its bytes at HBM bandwidth: seconds = ops x LAUNCH_S + bytes /
HBM. The ops and bytes per step of each way the trainer updates are the counts of
benchmarks/bench_optimizer.py (docs/trainer.md, Optimizer step), per tensor, per batch and
per element of the rank's trainable share:

- the bf16 full fine-tune (veri_tui/trainer/adamw.py) from SR_COMPILE_MIN_PARAMETERS on:
  one compiled kernel per tensor, reading w, g, m, v and writing w, m, v (14 bytes);
- a smaller bf16 model: eager ops over batches of SR_CHUNK elements;
- torch's AdamW (fp32 master weights, LoRA's fp32 adapters; foreach on CUDA);
- clip_grad_norm_ (foreach): a norm and a scale of every gradient: 3 passes of its bytes.

With cpu_offload the update and the clipping run on the host, on the rank's share of the
cores (the trainer gives each rank cores / local ranks: HOST_THREADS_PER_GPU assumed here)
at the per-thread rate measured on a 2-core machine, and no faster than the rank's share of
the host's memory bandwidth (HOST_GBPS_PER_GPU) moves the same bytes. The PCIe copies are
throughput.py's. On the GPU nothing of this overlaps the forward: the next step's first
layer needs its updated weights, and the trainer updates before it starts; the host step
runs beside the next forward, unit by unit, and throughput.py takes the part it hides off
the step (`hidden_s`). `host_one_thread_s` is the
same host step on one thread: what a CPU run's rank takes (the supervisor's
OMP_NUM_THREADS=1), the figure a CPU canary's measured optimizer time is set beside.
"""

from __future__ import annotations

import math
from typing import Any

from veri_tui.plan.memory import trained_weight_bytes
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.peak import SR_CHUNK, SR_COMPILE_MIN_PARAMETERS

LAUNCH_S = 5e-6  # host time to dispatch one op (throughput.LAYER_OVERHEAD_S's ~5 us a kernel)
# benchmarks/bench_optimizer.py's counts (tests/benchmarks/test_bench_optimizer.py holds them
# to the trainer's): ops = per tensor x tensors + per matrix x 2-D tensors (a gradient's flat
# view) + per batch x batches + fixed (the step counters, the scalars' tensors); bytes per
# element of the rank's share. The compiled kernel is one op a tensor.
KERNEL_BYTES = 14.0  # a fused kernel's (veri_tui/trainer/adamw_kernel.py KERNEL_BYTES)
COMPILED = {"per_tensor": 1.0, "per_matrix": 1.0, "per_batch": 0.0, "fixed": 12.0,
            "bytes": KERNEL_BYTES}  # fmt: skip
EAGER = {"per_tensor": 0.0, "per_matrix": 1.0, "per_batch": 86.0, "fixed": 1.0, "bytes": 555.0}
FOREACH = {"per_tensor": 2.0, "per_matrix": 0.0, "per_batch": 0.0, "fixed": 13.0, "bytes": 84.0}
CLIP = {"per_tensor": 1.0, "per_matrix": 0.0, "per_batch": 0.0, "fixed": 9.0, "passes": 3}
# The host's update per element and thread (CPU seconds, one thread, the same benchmark): the
# C kernel of the bf16 AdamW, and torch's foreach AdamW on fp32 (cpu_offload at fp32).
HOST_NATIVE_S = 1.36e-9
HOST_FOREACH_S = 6.5e-9
HOST_CLIP_S = 0.5e-9  # per element and thread, per pass over a gradient
# Per tensor on the host, whatever its size: the update's Python (its views and pointers)
# and clip_grad_norm_'s norm and scale (foreach on CPU tensors: an op each per tensor).
HOST_PER_TENSOR_S = 15e-6 + 13e-6
HOST_THREADS_PER_GPU = 8  # e.g. 64 of a node's cores over its 8 GPUs
HOST_GBPS_PER_GPU = 25.0  # a dual-socket node's ~400 GB/s of memory bandwidth over 8 GPUs,
# less what the PCIe copies of the other ranks take


def trainable_tensors(info: ModelInfo, lora_rank: int) -> tuple[int, int]:
    """(tensors, of them 2-D) the optimizer updates: LoRA's A and B per adapted linear, else
    every parameter tensor: per decoder layer 4 attention and 3 MLP weights (a router more in
    a MoE layer) and 2 norms (Qwen3's q/k norms too); the embedding, an untied head, the
    final norm."""
    if lora_rank:
        return 2 * info.lora_target_count, 2 * info.lora_target_count
    matrices = 7 * info.layer_count + info.moe_layer_count + (1 if info.tied_embeddings else 2)
    vectors = info.layer_count * (4 if info.qk_norm else 2) + 1
    return matrices + vectors, matrices


def _ops(way: dict[str, float], tensors: tuple[int, int], batches: int) -> float:
    return (way["per_tensor"] * tensors[0] + way["per_matrix"] * tensors[1]
            + way["per_batch"] * batches + way["fixed"])  # fmt: skip


def optimizer_seconds(
    info: ModelInfo, hbm_gbps: float | None, *, precision: str, lora_rank: int,
    zero_stage: int, gpu_count: int, cpu_offload: bool,
) -> dict[str, Any]:  # fmt: skip
    """One rank's optimizer step: {"optimizer_s", "way", "ops", "bytes", "elements",
    "tensors", "host_one_thread_s"} (`way`: compiled, eager, torch foreach, or host native /
    host torch foreach with cpu_offload; `ops` None on the host). `hbm_gbps` None: a GPU
    without a known bandwidth, launches only."""
    lora = lora_rank > 0
    total = info.adapter_parameters(lora_rank) if lora else info.parameter_count
    elements = total if zero_stage == 0 else math.ceil(total / max(gpu_count, 1))
    tensors = trainable_tensors(info, lora_rank)
    weight = trained_weight_bytes(precision, lora_rank)
    if precision == "bf16" and not lora:
        way = "compiled" if total >= SR_COMPILE_MIN_PARAMETERS else "eager"
        counts = COMPILED if way == "compiled" else EAGER
    else:
        way, counts = "torch foreach", FOREACH
    clip_bytes = CLIP["passes"] * weight * elements
    # The host's way: the C kernel for bf16 (any size), torch's foreach otherwise.
    native = way != "torch foreach"
    per_thread = (HOST_NATIVE_S if native else HOST_FOREACH_S) + CLIP["passes"] * HOST_CLIP_S
    host_moved = (KERNEL_BYTES if native else counts["bytes"]) * elements + clip_bytes
    one_thread = elements * per_thread + tensors[0] * HOST_PER_TENSOR_S
    if cpu_offload:
        seconds = tensors[0] * HOST_PER_TENSOR_S + max(
            elements * per_thread / HOST_THREADS_PER_GPU, host_moved / (HOST_GBPS_PER_GPU * 1e9)
        )
        return {"optimizer_s": seconds, "way": "host native" if native else "host torch foreach",
                "ops": None, "bytes": host_moved, "elements": elements, "tensors": tensors[0],
                "host_one_thread_s": one_thread}  # fmt: skip
    batches = math.ceil(elements / SR_CHUNK) if way == "eager" else 0
    ops = _ops(counts, tensors, batches) + _ops(CLIP, tensors, 0)
    moved = counts["bytes"] * elements + clip_bytes
    device_s = moved / (hbm_gbps * 1e9) if hbm_gbps else 0.0
    return {"optimizer_s": ops * LAUNCH_S + device_s, "way": way, "ops": ops, "bytes": moved,
            "elements": elements, "tensors": tensors[0],
            "host_one_thread_s": one_thread}  # fmt: skip
