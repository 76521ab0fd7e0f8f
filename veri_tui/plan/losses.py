"""What a loss holds beside the logits, per token per vocabulary entry: the bundled trainer's
chunked loss (veri_tui/trainer/losses.py) and the others published runs computed theirs with
(each measured on CPU by tests/plan/test_saved_tensors.py; benchmarks/ plans those runs).
The activation model (activations.py) weighs these at its three moments.
"""

from __future__ import annotations

from typing import NamedTuple

# The fp32 bytes of one chunk of logits in the loss: veri_tui/trainer/losses.py CHUNK_BYTES (the
# trainer cannot import this package; tests/trainer/test_losses.py checks they agree).
LOSS_CHUNK_BYTES = 256 * 2**20
# Per token beside the logits the loss keeps the label index (int64), its mask (bool) and
# the fp32 log-sum-exp: 8 + 1 + 4.
LOSS_KEPT_PER_TOKEN = 13


class LossMemory(NamedTuple):
    """What a loss holds, in bytes per token per vocabulary entry, at the end of the forward,
    once it is computed (until backward) and at the start of backward; `chunked`: beside one
    fp32 chunk (LOSS_CHUNK_BYTES) and 13 bytes per token of labels, mask and log-sum-exp."""

    forward: int
    kept: int
    backward: int
    chunked: bool = False


# The bundled trainer's (veri_tui/trainer/losses.py), and others' as their code computes them (each
# measured on CPU by tests/plan/test_saved_tensors.py; they run benchmarks/ published rows):
LOSSES = {
    # bf16 logits kept; backward writes their bf16 gradient beside one fp32 chunk.
    "chunked": LossMemory(2, 2, 4, chunked=True),
    # F.cross_entropy on the bf16 logits, which are dropped before backward (torchtitan's
    # `del pred`): log_softmax keeps its bf16 output; backward, its gradient and the input's.
    "ce_bf16": LossMemory(4, 2, 6),
    # The same on an fp32 copy (`pred.float()`): the copy and log_softmax's fp32 output,
    # then three fp32 tensors in backward.
    "ce_fp32": LossMemory(10, 4, 12),
    # A transformers model's shifted CrossEntropyLoss under CUDA autocast, which runs
    # cross_entropy in fp32: with one sample per micro-batch the shift is a view (no copy),
    # then the fp32 cast and log_softmax's fp32 output; the logits are dropped before
    # backward (HF Trainer keeps only the loss).
    "ce_autocast_shifted": LossMemory(10, 4, 12),
    # The same without autocast on half-precision logits (fp16/bf16 all through).
    "ce_shifted_half": LossMemory(4, 2, 6),
}


def loss_chunk_bytes(vocab_size: int, tokens: int) -> int:
    """The one fp32 chunk of logits the loss holds at a time (smaller for short batches)."""
    if vocab_size <= 0:
        return 0
    per_chunk = max(1, LOSS_CHUNK_BYTES // (4 * vocab_size))
    return 4 * vocab_size * min(tokens, per_chunk)
