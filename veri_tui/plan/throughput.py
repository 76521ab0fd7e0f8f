"""Step time and tokens/s: compute plus the data-parallel communication that is not hidden.

compute per micro-batch = FLOPs / (peak x MATMUL_EFFICIENCY[gpu])
  + tokens x passes x layers x hidden x ELEMENTWISE_BYTES / HBM bandwidth
  + layers x LAYER_OVERHEAD_S
  (matmuls at a fitted share of the peak; the memory-bound elementwise work, which weighs
  more on GPUs with more FLOPs per byte of bandwidth and on narrow models; a fixed per-layer
  cost: kernel launches, why efficiency grows with the tokens in a micro-batch). The two
  fitted constants come from published eager runs: docs/accuracy.md. Passes: forward,
  backward, and the recompute: all of the forward with gradient checkpointing; a caller may
  give a selective policy's shares of the FLOPs and of the elementwise passes (no knob sets
  them: the bundled trainer checkpoints whole layers; benchmarks/as_ran.py does, for runs).
communication (busbw from the GPU catalog; all-reduce moves 2(n-1)/n of the bytes, all-gather
and reduce-scatter (n-1)/n):
  zero_stage 0 (DDP): one all-reduce of the trainable gradients per optimizer step, hidden
    behind the last micro-batch's backward up to OVERLAP of it (no_sync before)
  zero_stage 2: per micro-batch, the bf16 weights all-gathered once (forward; kept through
    backward), exposed, and the gradients reduce-scattered, hidden behind backward up to
    OVERLAP: the trainer reduces on every micro-batch, since FSDP2 with sync off would hold
    the unsharded gradients (2-4 bytes x N) until the last one
  zero_stage 3: per micro-batch, the bf16 weights all-gathered in forward and again in
    backward plus a reduce-scatter of the gradients; the backward ones hide behind backward
    up to OVERLAP, the forward ones are counted exposed (conservative: FSDP2 prefetches one
    unit ahead, which on the slow links where the choice matters does not keep up)
  DPO full fine-tune at stages 2 and 3: the reference, sharded per layer, is all-gathered
    unit by unit for its forward on every micro-batch (bf16), exposed like forward gathers
optimizer step (veri_tui/plan/optimizer_time.py): once per optimizer step, after the last
  backward: the clipping and the update's launches and memory traffic on the GPU, or on the
  host with cpu_offload; exposed (the next forward needs the updated weights), but the host
  step's share of the layers hides behind the next forward's matmuls (`optimizer.hidden_s`:
  the trainer updates unit by unit beside it)
multi-node (the hierarchy, docs/planning.md): a collective over N nodes x G GPUs runs inside
  each node over NVLink (busbw, the G-GPU factor) and across nodes over the network (the node's
  internode bandwidth shared by its G GPUs, each moving 1/G of the bytes: the N-node factor
  on the whole buffer), one after the other.
Constants and their sources: docs/planning.md.
"""

from __future__ import annotations

from typing import Any

from veri_tui.plan.activations import sequence_length
from veri_tui.plan.gpus import GPU
from veri_tui.plan.memory import COMPUTE_BYTES, trained_weight_bytes
from veri_tui.plan.model_info import ModelInfo
from veri_tui.plan.optimizer_time import optimizer_seconds

# Share of the dense bf16 peak an eager PyTorch step's matmuls reach (the bundled trainer runs
# eager), and the elementwise memory traffic per token, layer, hidden unit and pass: fitted
# to published eager FSDP runs by benchmarks/estimate_accuracy.py (docs/accuracy.md).
# Hopper parts reach a lower share than Ampere with the same eager kernels. GPUs without
# published runs here (L4, B200) take the lower figure.
MATMUL_EFFICIENCY = {"A10G-24GB": 0.80, "A100-40GB": 0.80, "A100-80GB": 0.80,
                     "H100-80GB": 0.61, "H200-141GB": 0.61}  # fmt: skip
DEFAULT_MATMUL_EFFICIENCY = 0.61
ELEMENTWISE_BYTES = 170
# HBM bandwidth, GB/s, from each datasheet (A100-40GB: 1,555; A100 80GB SXM: 2,039).
HBM_GBPS = {"L4-24GB": 300.0, "A10G-24GB": 600.0, "A100-40GB": 1555.0, "A100-80GB": 2039.0,
            "H100-80GB": 3350.0, "H200-141GB": 4800.0, "B200-180GB": 8000.0}  # fmt: skip
LAYER_OVERHEAD_S = 0.25e-3  # ~50 kernels per layer (fwd + bwd) x ~5 us launch each
OVERLAP = 0.8  # share of backward time that communication kernels can run under
HOST_LINK_GBPS = 25.0  # PCIe Gen4 x16 host<->device copies, used by cpu_offload


def flops_per_token(
    info: ModelInfo, seq: int, *, lora: bool, gc: bool, dpo: bool,
    recompute_fraction: float | None = None,
) -> dict[str, float]:  # fmt: skip
    """Hardware FLOPs per token: forward, backward, recompute, DPO reference forward.
    `recompute_fraction`: the share of the forward recomputed in backward (None: all of it
    with `gc`, none without; selective checkpointing recomputes a part).

    The matmuls are those of the parameters a token uses: a mixture of experts counts its
    active parameters (the k routed experts a token is sent to, the router, shared experts),
    not N. `router` is the routers' share of the forward (2 x h x E per MoE layer), in it."""
    matmul_params = info.active_parameter_count - info.embedding_parameters
    if info.tied_embeddings:
        matmul_params += info.vocab_size * info.hidden_size  # the head still multiplies
    # Scores use the q/k width per head, the weighted sum the v width (DeepSeek's latent
    # attention: 192 and 128); both are head_dim elsewhere.
    qk = info.num_attention_heads * info.head_dim or info.hidden_size
    v = info.num_attention_heads * info.v_head_dim or info.hidden_size
    fwd = 2 * matmul_params + 2 * info.layer_count * (qk + v) * seq  # PaLM: 6N + 12*L*H*Q*T
    # Frozen weights (LoRA) need activation gradients but no weight gradients.
    bwd = fwd if lora else 2 * fwd
    recompute: float  # FLOPs: a fraction of the forward's under selective checkpointing
    if recompute_fraction is None:
        recompute = fwd if gc else 0
    else:
        recompute = fwd * recompute_fraction
    reference = fwd if dpo else 0
    return {
        "forward": fwd,
        "router": 2 * info.router_parameters,
        "backward": bwd,
        "recompute": recompute,
        "reference": reference,
        "total": fwd + bwd + recompute + reference,
    }


def _factor(n: int, collective: str) -> float:
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def _collective_s(
    nbytes: float, n: int, gpu: GPU, collective: str, count: int = 1, nodes: int = 1,
    internode_gbps: float = 0.0,
) -> float:  # fmt: skip
    """Seconds for one collective over `n` ranks; with `nodes` > 1, NVLink inside each node
    plus the network across them (`internode_gbps`, Gb/s per node)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    nodes = max(1, min(nodes, n))
    per_node = n // nodes
    intra = nbytes * _factor(per_node, collective) / (gpu.busbw_gbps * 1e9) if per_node > 1 else 0.0
    inter = 0.0
    if nodes > 1:
        inter = nbytes * _factor(nodes, collective) / (internode_gbps * 1e9 / 8)
    return intra + inter + count * gpu.latency_us * 1e-6


def estimate_throughput(
    info: ModelInfo,
    gpu: GPU,
    *,
    method: str,
    gpu_count: int,
    zero_stage: int,
    precision: str,
    lora_rank: int,
    micro_batch_size: int,
    gradient_accumulation_steps: int,
    max_seq_length: int,
    max_length: int,
    gradient_checkpointing: bool,
    cpu_offload: bool = False,
    nodes: int = 1,
    internode_gbps: float = 25.0,
    recompute_fraction: float | None = None,
    recompute_elementwise: float | None = None,
) -> dict[str, Any]:
    """One plan's step time, tokens/s, compute/communication split and scaling efficiency;
    `nodes` machines joined by `internode_gbps` (Gb/s per node) share the `gpu_count`.

    Selective activation checkpointing: `recompute_fraction` is the share of the forward's
    FLOPs and `recompute_elementwise` the share of its elementwise passes recomputed in
    backward (None: what `gradient_checkpointing` means, all of both or none)."""
    if gpu.bf16_dense_tflops is None:
        return {"known": False, "reason": f"{gpu.name} has no known peak; pick a catalog GPU"}
    n = max(gpu_count, 1)
    seq = sequence_length(method, max_seq_length, max_length)
    lora = lora_rank > 0
    f = flops_per_token(
        info, seq, lora=lora, gc=gradient_checkpointing, dpo=method == "dpo",
        recompute_fraction=recompute_fraction,
    )  # fmt: skip
    tokens_mb = micro_batch_size * seq
    peak = gpu.bf16_dense_tflops * 1e12 * MATMUL_EFFICIENCY.get(gpu.name, DEFAULT_MATMUL_EFFICIENCY)
    layers = max(info.layer_count, 1)
    overhead = layers * LAYER_OVERHEAD_S
    passes = f["total"] / f["forward"] if f["forward"] else 0.0
    if recompute_elementwise is not None and f["forward"]:
        # Selective checkpointing saves some matmul outputs but reruns the elementwise ops
        # between them: the elementwise passes need not follow the recomputed FLOPs.
        passes = (f["total"] - f["recompute"]) / f["forward"] + recompute_elementwise
    traffic = passes * layers * info.hidden_size * ELEMENTWISE_BYTES * tokens_mb
    hbm = HBM_GBPS.get(gpu.name)  # every catalog GPU has one; a new one without it: no term
    memory_s = traffic / (hbm * 1e9) if hbm else 0.0
    mb_s = f["total"] * tokens_mb / peak + memory_s + overhead
    bwd_s = (f["backward"] + f["recompute"]) * tokens_mb / peak
    ga = gradient_accumulation_steps
    compute_s = ga * mb_s
    trainable = info.adapter_parameters(lora_rank) if lora else info.parameter_count
    grad_bytes = trained_weight_bytes(precision, lora_rank) * trainable
    raw_comm = exposed = 0.0
    net = (nodes, internode_gbps)
    units = layers + 1  # FSDP2 units: one per decoder layer, plus the root
    gather_bytes = COMPUTE_BYTES * info.parameter_count
    if n > 1 and zero_stage == 0:
        # DDP's gradient buckets stream back to back under backward: one latency shows.
        raw_comm = _collective_s(grad_bytes, n, gpu, "all_reduce", 1, *net)
        exposed = max(0.0, raw_comm - OVERLAP * bwd_s)
    elif n > 1 and zero_stage == 2:
        fwd_c = _collective_s(gather_bytes, n, gpu, "all_gather", units, *net)
        bwd_c = _collective_s(grad_bytes, n, gpu, "reduce_scatter", units, *net)
        raw_comm = ga * (fwd_c + bwd_c)
        exposed = ga * (fwd_c + max(0.0, bwd_c - OVERLAP * bwd_s))
    elif n > 1 and zero_stage == 3:
        fwd_c = _collective_s(gather_bytes, n, gpu, "all_gather", units, *net)
        bwd_c = _collective_s(gather_bytes, n, gpu, "all_gather", units, *net)
        bwd_c += _collective_s(grad_bytes, n, gpu, "reduce_scatter", units, *net)
        raw_comm = ga * (fwd_c + bwd_c)
        exposed = ga * (fwd_c + max(0.0, bwd_c - OVERLAP * bwd_s))
    if n > 1 and zero_stage in (2, 3) and method == "dpo" and not lora:
        ref_c = ga * _collective_s(gather_bytes, n, gpu, "all_gather", units, *net)
        raw_comm += ref_c
        exposed += ref_c
    if cpu_offload:
        # Sharded weights come in twice (forward, backward), gradients go out once.
        moved = (2 * COMPUTE_BYTES * info.parameter_count + grad_bytes) / n
        host_s = ga * moved / (HOST_LINK_GBPS * 1e9)
        raw_comm += host_s
        exposed += host_s
    knobs: dict[str, Any] = {"precision": precision, "lora_rank": lora_rank}
    opt = optimizer_seconds(info, hbm, **knobs, zero_stage=zero_stage, gpu_count=n,
                            cpu_offload=cpu_offload)  # fmt: skip
    optimizer_s = opt.pop("optimizer_s")
    hidden_s = 0.0
    if opt["way"] == "host native":
        # The trainer updates the host shards unit by unit beside the next forward
        # (veri_tui/trainer/adamw_overlap.py): the root's (embedding, head) before it starts,
        # the layers' hidden behind the first micro-batch's forward matmuls at most.
        root = info.vocab_size * info.hidden_size * (1 if info.tied_embeddings else 2)
        layers_s = optimizer_s * max(0.0, 1 - root / max(info.parameter_count, 1))
        hidden_s = min(layers_s, f["forward"] * tokens_mb / peak)
    opt["hidden_s"] = hidden_s
    step_s = compute_s + exposed + optimizer_s - hidden_s
    gbs = micro_batch_size * ga * n
    tokens_step = gbs * seq
    # One GPU doing the same optimizer batch, and its optimizer step on the whole model.
    alone = optimizer_seconds(info, hbm, **knobs, zero_stage=0, gpu_count=1, cpu_offload=False)
    single_s = (gbs // micro_batch_size) * mb_s + alone["optimizer_s"]
    return {
        "known": True,
        "gpu_count": n,
        "nodes": nodes,
        "internode_gbps": internode_gbps if nodes > 1 else None,
        "zero_stage": zero_stage,
        "sequence_length": seq,
        "tokens_per_micro_batch": tokens_mb,
        "flops_per_token": f["total"],
        "active_parameter_count": info.active_parameter_count,
        "compute_s": compute_s,
        "communication_s": raw_comm,
        "exposed_communication_s": exposed,
        "optimizer_s": optimizer_s,
        "optimizer": opt,
        "step_time_s": step_s,
        "tokens_per_step": tokens_step,
        "tokens_per_s": tokens_step / step_s,
        "compute_fraction": compute_s / step_s,
        "scaling_efficiency": single_s / (n * step_s),
        "communication_bound": exposed > compute_s,
        "mfu": f["total"] * tokens_step / (step_s * n * gpu.bf16_dense_tflops * 1e12),
    }
