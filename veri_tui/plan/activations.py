"""Activation memory per GPU for one micro-batch: shown beside the plan, never used by auto.

Per token, for a Llama-style decoder layer with SDPA/flash attention (no s x s scores kept),
bf16 compute and HF's RMSNorm (which keeps an fp32 copy of its input), the tensors saved for
backward are, in bytes:
  norms:     2 x (2h bf16 in + 2h bf16 out + 4h fp32 copy)          = 16h
  attention: q (2qd) + k, v (2 x 2kvd) + attention output (2qd)     = 4qd + 4kvd
             + the softmax log-sum-exp, fp32 per head               = 4a
  MLP:       gate, silu(gate), up, silu(gate) x up (4 x 2I)         = 8I
A mixture-of-experts layer's MLP saves instead, per token (transformers 5's default
grouped_mm experts, measured with saved_tensors_hooks): per routed copy (k per token) its
gathered input and its output (4h), the SwiGLU's 8I (I = moe_intermediate_size) and 34 bytes
of sort indices and routing weight; the router's fp32 probabilities (4E); each shared expert's
8I. DeepSeek's latent attention keeps v and its output at the v width and its two latents
normed (8 x (q_lora_rank + kv_lora_rank)).
With gradient checkpointing each layer keeps only its bf16 input (2h) and one layer is
recomputed at a time. Logits and loss, as trainer/losses.py computes them (the label
log-probabilities by gather minus a logsumexp taken over chunks of tokens, never a
full-vocabulary fp32 log_softmax): the bf16 logits kept for backward (2V) and their bf16
gradient (2V) = 4V per token, plus one fp32 chunk of logits (LOSS_CHUNK_BYTES at most) per
micro-batch. Derivation, measurements and sources: docs/planning.md.
"""

from __future__ import annotations

from veri_tui.plan.gpus import GPU
from veri_tui.plan.memory import COMPUTE_BYTES, UNITS_IN_FLIGHT
from veri_tui.plan.model_info import ModelInfo

LOGITS_BYTES_PER_VOCAB = 2 + 2
# The fp32 bytes of one chunk of logits in the loss: trainer/losses.py CHUNK_BYTES (the
# trainer cannot import this package; tests/trainer/test_losses.py checks they agree).
LOSS_CHUNK_BYTES = 256 * 2**20
FINAL_NORM_BYTES_PER_HIDDEN = 2 + 2 + 4


# A MoE layer, per routed copy of a token: int64 sort/unsort indices (4 x 8) + its bf16
# routing weight (2); per expert of the router: its fp32 probability (measured, module doc).
MOE_INDEX_BYTES = 34
ROUTER_BYTES_PER_EXPERT = 4


def mlp_bytes_per_token(info: ModelInfo, moe: bool = False) -> int:
    """Bytes a layer's MLP saves per token beyond its input: dense 8I, or a MoE block's."""
    if not moe:
        return 8 * info.intermediate_size
    routed = 8 * info.moe_intermediate_size + 4 * info.hidden_size + MOE_INDEX_BYTES
    return (
        (info.experts_per_token or info.experts) * routed  # k unknown: every expert
        + ROUTER_BYTES_PER_EXPERT * info.experts
        + 8 * info.shared_expert_intermediate_size
    )


def layer_bytes_per_token(info: ModelInfo, moe: bool = False) -> int:
    """Bytes one decoder layer (a MoE one with `moe`) saves for backward, per token, without
    checkpointing."""
    h, a, kv = info.hidden_size, info.num_attention_heads, info.num_key_value_heads
    qd = a * info.head_dim or h
    kvd = kv * info.head_dim or h
    # q, k at the q/k width; v and the attention output at the v width (equal but in MLA).
    attention = (
        2 * qd + 2 * kvd + 2 * (kv * info.v_head_dim or kvd) + 2 * (a * info.v_head_dim or qd)
    )
    latents = 8 * (info.q_lora_rank + info.kv_lora_rank)
    return 16 * h + attention + latents + 4 * a + mlp_bytes_per_token(info, moe)


def bytes_per_token(info: ModelInfo, gradient_checkpointing: bool) -> int:
    """Peak activation bytes per token in one micro-batch, logits and loss included."""
    layers = max(info.layer_count, 1)
    moe_layers = info.moe_layer_count
    per_layer = layer_bytes_per_token(info) if layers > moe_layers else 0
    per_moe = layer_bytes_per_token(info, moe=True) if moe_layers else 0
    if gradient_checkpointing:
        body = layers * 2 * info.hidden_size + max(per_layer, per_moe)
    else:
        body = (layers - moe_layers) * per_layer + moe_layers * per_moe
    root = FINAL_NORM_BYTES_PER_HIDDEN * info.hidden_size
    return body + root + LOGITS_BYTES_PER_VOCAB * info.vocab_size


def loss_chunk_bytes(vocab_size: int, tokens: int) -> int:
    """The one fp32 chunk of logits the loss holds at a time (smaller for short batches)."""
    if vocab_size <= 0:
        return 0
    per_chunk = max(1, LOSS_CHUNK_BYTES // (4 * vocab_size))
    return 4 * vocab_size * min(tokens, per_chunk)


def _largest_mbs(available: int, per_sample: int, seq: int, vocab_size: int) -> int:
    """The largest mbs with mbs x per_sample + loss_chunk_bytes(mbs x seq) <= available.

    The chunk is one per micro-batch: either full (then mbs <= `full`) or covering all of a
    small micro-batch (4V bytes per token, then mbs <= `small`); both candidates fit.
    """
    full = max(available - loss_chunk_bytes(vocab_size, 2**62), 0) // per_sample
    small = max(available, 0) // (per_sample + 4 * vocab_size * seq)
    return max(full, small)


def sequence_length(method: str, max_seq_length: int, max_length: int) -> int:
    """Tokens per sample in one forward: DPO runs chosen and rejected together."""
    return 2 * max_length if method == "dpo" else max_seq_length


def estimate_activations(
    info: ModelInfo,
    gpu: GPU,
    *,
    method: str,
    micro_batch_size: int,
    max_seq_length: int,
    max_length: int,
    gradient_checkpointing: bool,
    zero_stage: int,
    states_bytes: int,
) -> dict:
    """Activation bytes per GPU, with and without checkpointing, and the largest mbs that fits.

    What is left for activations is the memory after the 2 GiB reserve, minus the states and,
    at stage 3, the gathered units in flight (two bf16 layers).
    """
    seq = sequence_length(method, max_seq_length, max_length)
    known = info.hidden_size > 0 and info.vocab_size > 0
    tokens = micro_batch_size * seq
    chunk = loss_chunk_bytes(info.vocab_size, tokens) if known else 0
    with_gc = bytes_per_token(info, True) * tokens + chunk if known else 0
    without_gc = bytes_per_token(info, False) * tokens + chunk if known else 0
    transient = (
        UNITS_IN_FLIGHT * COMPUTE_BYTES * info.largest_layer_parameters if zero_stage == 3 else 0
    )
    available = gpu.usable_bytes - states_bytes - transient
    current = with_gc if gradient_checkpointing else without_gc
    per_sample = bytes_per_token(info, gradient_checkpointing) * seq if known else 0
    max_mbs = _largest_mbs(available, per_sample, seq, info.vocab_size) if per_sample else None
    return {
        "known": known,
        "sequence_length": seq,
        "micro_batch_size": micro_batch_size,
        "tokens_per_micro_batch": tokens,
        "gradient_checkpointing": gradient_checkpointing,
        "bytes_per_gpu": current,
        "with_checkpointing_bytes": with_gc,
        "without_checkpointing_bytes": without_gc,
        "logits_and_loss_bytes": LOGITS_BYTES_PER_VOCAB * info.vocab_size * tokens + chunk,
        "loss_chunk_bytes": chunk,
        "transient_gather_bytes": transient,
        "available_bytes": available,
        "fits": known and current <= available,
        "max_micro_batch_size": max_mbs,
    }
