"""Model-state memory per GPU (contracts section 3), as exact integers.

bytes/param: bf16 = 2 weights + 2 grads + 4 AdamW (m, v) = 8; fp32 master = 4 + 4 + 8 = 16.
  stage 0 (DDP):          bytes/param x N, whole on every GPU
  stage 2 (FSDP2, no reshard after forward): 2 x N (bf16 compute copy, whole)
                          + bytes/param x N / dp
  stage 3 (FSDP2):        bytes/param x N / dp
LoRA: the frozen base costs 2 bytes/param; the adapters are fp32 in either precision (the
trainer keeps them so: tiny, and a bf16 adapter loses every update below half a bf16 step),
so 4 weight + 4 grad + 8 AdamW = 16 bytes/param (ADAPTER_BYTES_PER_PARAM); both are divided
as above. A bf16 full fine-tune stays at 8: bf16 weights and moments, the update
stochastically rounded (veri_tui/trainer/adamw.py). DPO full fine-tune adds the reference model, 2 x
N: whole on every GPU at stage 0; at stages 2 and 3 sharded per decoder layer like the
policy and resharded after each layer's forward, so 2 x N / dp, its layers in flight being
transient like the policy's (contracts s.3; the seed counts the reference "in full": ours
holds less, and tests/trainer/test_state_bytes.py measures it).
QLoRA (load_in_4bit, one GPU): every linear of the decoder layers is stored as bitsandbytes
NF4 with double quantisation, whether LoRA adapts it or not (transformers hands each
nn.Linear but the head to bitsandbytes: model_info.py `quantized_weight`), 0.5 byte per
weight + one uint8 absmax per block of 64 + one fp32 per 256 blocks (NF4_NUM / NF4_DEN);
embeddings, norms, the head and a mixture of experts' fused experts and router stay bf16.
cpu_offload: the GPU holds only what is gathered (in_flight_bytes: the root unit, two layers,
one layer's unsharded gradient); the shards live on the host.
Divisions are exact (rounded up once, at the end). FSDP2 pads each parameter's dim 0 to a
multiple of dp, so a rank can hold up to (dp - 1) rows per parameter more than N / dp: a
fraction of a percent on real models, documented rather than modelled.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from veri_tui.plan.model_info import ModelInfo

BYTES_PER_PARAM = {"bf16": 8, "fp32": 16}
WEIGHT_BYTES = {"bf16": 2, "fp32": 4}
FROZEN_BYTES = 2  # frozen base and DPO reference: bf16, no grads, no optimizer states
ADAPTER_WEIGHT_BYTES = 4  # LoRA adapters: fp32 in both precisions (veri_tui/trainer/model.py)
ADAPTER_BYTES_PER_PARAM = 16  # fp32 weight + fp32 grad + fp32 AdamW m and v
COMPUTE_BYTES = 2  # gathered / compute copies are bf16 in every precision
# FSDP2 keeps the layer being computed and the next one (prefetch) gathered at once.
UNITS_IN_FLIGHT = 2
# bitsandbytes NF4 with double quantisation (blocksize 64; the absmax as uint8, 256 blocks
# per fp32 second-level scale): 0.5 + 1/64 + 4/16384 bytes per weight (docs/planning.md).
NF4_NUM, NF4_DEN = 8192 + 256 + 4, 16384


def trained_weight_bytes(precision: str, lora_rank: int) -> int:
    """Bytes of one trained parameter (and of its gradient): the precision's, fp32 for a
    LoRA adapter in either precision."""
    return ADAPTER_WEIGHT_BYTES if lora_rank > 0 else WEIGHT_BYTES[precision]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class MemoryEstimate(NamedTuple):
    """Per-GPU model-state bytes for one (precision, stage, dp, LoRA, method, offload);
    a NamedTuple, cheaper to define than a dataclass at every `veri-tui plan` start-up."""

    zero_stage: int
    data_parallel_size: int
    precision: str
    lora_rank: int
    dpo_reference: bool
    cpu_offload: bool
    parameter_count: int
    trainable_parameter_count: int
    states_bytes_per_gpu: int
    host_bytes_per_node: int
    components: dict[str, int]
    load_in_4bit: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the `memory_estimate` of resolved_parallelism)."""
        d = self._asdict()
        d["components"] = dict(self.components)
        return d


def in_flight_bytes(info: ModelInfo, *, zero_stage: int, precision: str, lora_rank: int) -> int:
    """What FSDP2 holds gathered at the peak (0 under DDP): the root unit (embeddings, head,
    final norm: FSDP2 does not reshard the root after forward), at stage 3 two decoder layers
    (the one computing, the one prefetched), and one layer's gradient, unsharded in bf16
    (plus its fp32 cast for an fp32 reduce) until its reduce-scatter. At stage 2 every layer
    stays gathered: the states' compute copy already counts them."""
    if zero_stage == 0:
        return 0
    layers = max(info.layer_count, 1)
    # The root unit: embeddings, an untied head and the final norm (h weights).
    root = info.embedding_parameters + info.lm_head_parameters + info.hidden_size
    layer = (info.parameter_count - root) // layers
    grad = layer if not lora_rank else _ceil_div(info.adapter_parameters(lora_rank), layers)
    fp32_reduce = precision == "fp32" or lora_rank > 0  # fp32 trained params reduce in fp32
    grad_bytes = grad * (COMPUTE_BYTES + (4 if fp32_reduce else 0))
    if zero_stage == 2:
        return grad_bytes
    return COMPUTE_BYTES * (root + UNITS_IN_FLIGHT * layer) + grad_bytes


def frozen_base_bytes(info: ModelInfo, load_in_4bit: bool) -> int:
    """The frozen base of a LoRA job: bf16, or NF4 for every linear transformers quantises
    (QLoRA: `quantized_parameters`, adapted or not)."""
    if not load_in_4bit:
        return FROZEN_BYTES * info.parameter_count
    quantized = info.quantized_parameters
    nf4 = -(-quantized * NF4_NUM // NF4_DEN)
    return FROZEN_BYTES * (info.parameter_count - quantized) + nf4


def estimate_states(
    info: ModelInfo,
    *,
    precision: str,
    zero_stage: int,
    dp: int,
    lora_rank: int = 0,
    dpo: bool = False,
    cpu_offload: bool = False,
    gpus_per_node: int | None = None,
    load_in_4bit: bool = False,
) -> MemoryEstimate:
    """States per GPU for this layout; see the module docstring for the formulas."""
    n = info.parameter_count
    b = BYTES_PER_PARAM[precision]
    w = WEIGHT_BYTES[precision]
    dp = max(dp, 1)
    div = 1 if zero_stage == 0 else dp
    if lora_rank > 0:
        a = info.adapter_parameters(lora_rank)
        trainable = a
        base = frozen_base_bytes(info, load_in_4bit and lora_rank > 0)
        aw = ADAPTER_WEIGHT_BYTES
        sharded_total = base + ADAPTER_BYTES_PER_PARAM * a
        compute_params = n + a
        parts = {
            "frozen_base": base,
            "weights": aw * a,
            "gradients": aw * a,
            "optimizer": 2 * aw * a,
        }
    else:
        trainable = n
        sharded_total = b * n
        compute_params = n
        parts = {"weights": w * n, "gradients": w * n, "optimizer": 2 * w * n}
    components = {k: _ceil_div(v, div) for k, v in parts.items()}
    reference = 0
    if dpo and lora_rank == 0:
        # Whole under DDP; under FSDP2 its shard (the layers gathered in turn are transient).
        reference = _ceil_div(FROZEN_BYTES * n, div)
    host = 0
    if cpu_offload:
        # Everything sharded lives on the host; the GPU holds what is gathered.
        in_flight = in_flight_bytes(info, zero_stage=3, precision=precision, lora_rank=lora_rank)
        components = {"in_flight": in_flight}
        states = in_flight
        per_node = min(dp, gpus_per_node or dp)
        host = _ceil_div(sharded_total * per_node, dp)
    elif zero_stage == 2:
        components["compute_copy"] = COMPUTE_BYTES * compute_params
        states = COMPUTE_BYTES * compute_params + _ceil_div(sharded_total, dp)
    else:
        states = _ceil_div(sharded_total, div)
    if reference:
        components["reference"] = reference
        states += reference
    return MemoryEstimate(
        zero_stage=zero_stage,
        data_parallel_size=dp,
        precision=precision,
        lora_rank=lora_rank,
        dpo_reference=bool(reference),
        cpu_offload=cpu_offload,
        parameter_count=n,
        trainable_parameter_count=trainable,
        states_bytes_per_gpu=states,
        host_bytes_per_node=host,
        components=components,
        load_in_4bit=load_in_4bit and lora_rank > 0,
    )


def gb(nbytes: int | float) -> str:
    """Bytes as decimal GB with one decimal, as shown everywhere (10^9 bytes)."""
    return f"{nbytes / 1e9:.1f} GB"
