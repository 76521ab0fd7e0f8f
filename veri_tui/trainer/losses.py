"""Losses as sums, so the loop can divide by the GLOBAL batch's target count.

SFT: the sum of next-token cross-entropies over target tokens. DPO: the sum over pairs of
-log sigmoid(beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))),
with sequence log-probabilities summed over completion tokens.

Both take the label tokens' log-probabilities from `token_logps`, which never builds a
full-vocabulary fp32 log_softmax: it gathers the label logits and subtracts a logsumexp
computed over chunks of the tokens, so at most one chunk's fp32 copy of the logits exists
at a time (forward and backward). What stays from forward to backward is the model's own
bf16 logits; backward writes one bf16 gradient of them. veri_tui/plan/activations.py counts
exactly that (2V + 2V bytes per token, plus one chunk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from veri_tui.trainer.data import IGNORE, Example, collate

# The fp32 bytes of one chunk of logits (the same constant as LOSS_CHUNK_BYTES in
# veri_tui/plan/activations.py; tests/trainer/test_losses.py checks they agree).
CHUNK_BYTES = 256 * 2**20


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def count_targets(examples: list[Example]) -> int:
    """Target tokens after the one-token shift (the first position predicts nothing)."""
    return sum(sum(lab != IGNORE for lab in e.labels[1:]) for e in examples)


def chunk_tokens(vocab: int) -> int:
    """Tokens per chunk: as many as fit CHUNK_BYTES in fp32."""
    return max(1, CHUNK_BYTES // (4 * vocab))


class _TokenLogps(torch.autograd.Function):
    """log p(target) per row of (N, V) logits; 0 where the target is IGNORE.

    Saves the logits as they are (bf16 in training) and one fp32 logsumexp per row; the
    backward recomputes softmax chunk by chunk: d logp / d logits = onehot(target) - softmax.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
        dtype = torch.promote_types(logits.dtype, torch.float32)
        keep = targets != IGNORE
        safe = torch.where(keep, targets, 0).unsqueeze(-1)
        lse = torch.empty(logits.shape[0], dtype=dtype, device=logits.device)
        out = torch.empty_like(lse)
        for s in range(0, logits.shape[0], chunk):
            x = logits[s : s + chunk].to(dtype, copy=True)  # the one fp32 chunk
            top = x.amax(-1, keepdim=True)
            picked = x.gather(-1, safe[s : s + chunk]).squeeze(-1)
            total = x.sub_(top).exp_().sum(-1).log_() + top.squeeze(-1)
            lse[s : s + chunk] = total
            out[s : s + chunk] = picked - total
            del x  # before the next chunk's copy, or two would coexist
        out.masked_fill_(~keep, 0.0)
        ctx.save_for_backward(logits, safe, keep, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        logits, safe, keep, lse = ctx.saved_tensors
        g = torch.where(keep, grad_out, 0).to(lse.dtype).unsqueeze(-1)
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], ctx.chunk):
            e = s + ctx.chunk
            x = logits[s:e].to(lse.dtype, copy=True)
            x.sub_(lse[s:e].unsqueeze(-1)).exp_().mul_(-g[s:e])  # -softmax * g
            x.scatter_add_(-1, safe[s:e], g[s:e])  # + onehot * g
            grad[s:e] = x
            del x
        return grad, None, None


# torch leaves Function.apply unannotated: (N, V) logits, (N,) targets, chunk -> (N,) fp32.
_token_logps = cast(Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor], _TokenLogps.apply)


def token_logps(logits: torch.Tensor, labels: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """Log-probability of each next token: (B, S, V) logits, (B, S) labels -> (B, S) fp32.

    Position t is scored on labels[t + 1] (the last position on nothing); IGNORE labels and
    padding give 0. `chunk` (tokens per chunk) defaults to what fits CHUNK_BYTES.
    """
    b, s, v = logits.shape
    targets = torch.full_like(labels, IGNORE)
    targets[:, :-1] = labels[:, 1:]
    flat = logits.reshape(b * s, v)  # a view: the model's logits are contiguous
    out = _token_logps(flat, targets.reshape(-1), chunk or chunk_tokens(v))
    return out.view(b, s)


def forward_logits(model: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's logits for a collated batch: padded rows with their attention mask, or
    packed rows with their position ids (veri_tui/trainer/data.py `collate`). A packed forward runs
    without a KV cache: transformers finds packed samples from the position ids only when
    there is neither a 2D mask nor a cache, and would otherwise attend across samples."""
    if "position_ids" in b:
        out = model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False)
    else:
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    return cast(torch.Tensor, out.logits)  # a transformers CausalLMOutput's field


def sft_loss_sum(
    model: nn.Module, examples: list[Example], pad_id: int, device: torch.device
) -> torch.Tensor:
    """Summed cross-entropy of one micro-batch."""
    b = _to(collate(examples, pad_id), device)
    return -token_logps(forward_logits(model, b), b["labels"]).sum()


def sequence_logps(model: nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-row sum of log-probabilities of the target tokens."""
    return token_logps(forward_logits(model, b), b["labels"]).sum(-1)


def dpo_loss_sum(
    model: nn.Module,
    pairs: list[tuple[Example, Example]],
    pad_id: int,
    device: torch.device,
    beta: float,
    reference: Callable[[dict[str, torch.Tensor]], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed DPO loss of one micro-batch (chosen and rejected in one forward), and the sums
    over its pairs of the chosen reward, the rejected reward and of chosen > rejected, where
    a reward is beta * (policy - reference) sequence log-probability (TRL's definition)."""
    rows = [c for c, _ in pairs] + [r for _, r in pairs]
    b = _to(collate(rows, pad_id), device)
    with torch.no_grad():
        ref = reference(b)
    pol = sequence_logps(model, b)
    n = len(pairs)
    rewards = beta * (pol - ref).detach().double()
    chosen, rejected = rewards[:n], rewards[n:]
    margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
    loss = -F.logsigmoid(beta * margin).sum()
    sums = torch.stack([chosen.sum(), rejected.sum(), (chosen > rejected).double().sum()])
    return loss, sums
