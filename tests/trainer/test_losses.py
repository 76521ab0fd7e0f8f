"""The chunked label log-probabilities against the straightforward log_softmax computation.

veri_tui.trainer.losses.token_logps gathers the label logits and subtracts a logsumexp computed over
chunks of tokens, with its own backward. It must give what log_softmax + gather gives
(values and gradients, bf16 and fp32 logits, IGNORE labels and padding), the SFT and DPO
losses built on it must equal the code they replaced, and it must hold at most one chunk's
fp32 copy of the logits at a time (peak RSS of a child process, VmHWM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from veri_tui.plan.losses import LOSS_CHUNK_BYTES
from veri_tui.trainer import losses
from veri_tui.trainer.data import IGNORE, Example, collate

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-model"


def reference_logps(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The old code: a full-vocabulary fp32 log_softmax, then gather (B, S-1)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    targets = labels[:, 1:]
    picked = torch.gather(logp, 2, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked * (targets != IGNORE)


def random_case(dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    logits = (4 * torch.randn(3, 19, 61, generator=gen)).to(dtype).requires_grad_()
    labels = torch.randint(0, 61, (3, 19), generator=gen)
    labels[0, :6] = IGNORE  # a prompt
    labels[1, 11:] = IGNORE  # right padding
    labels[2, ::3] = IGNORE  # scattered
    return logits, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 7, 57, 0])  # 0: the default (one chunk here)
def test_token_logps_equal_log_softmax(dtype: torch.dtype, chunk: int) -> None:
    logits, labels = random_case(dtype, seed=chunk)
    weights = torch.randn(3, 19, generator=torch.Generator().manual_seed(1))
    got = losses.token_logps(logits, labels, chunk)
    assert got.dtype == torch.float32 and got.shape == labels.shape
    assert torch.all(got[:, -1] == 0)  # the last position predicts nothing
    assert torch.all(got[:, :-1][labels[:, 1:] == IGNORE] == 0)
    want = reference_logps(logits, labels)
    torch.testing.assert_close(got[:, :-1], want, rtol=1e-6, atol=1e-5)
    (grad_got,) = torch.autograd.grad((got * weights).sum(), logits)
    (grad_want,) = torch.autograd.grad((want * weights[:, :-1]).sum(), logits)
    assert grad_got.dtype == dtype
    # Both compute the gradient in fp32 and round it once to the logits' dtype.
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 1e-6}
    torch.testing.assert_close(grad_got, grad_want, **tol)


def test_token_logps_gradcheck_in_float64() -> None:
    logits, labels = random_case(torch.float64, seed=5)
    small = logits.detach()[:, :6, :9].clone().requires_grad_()
    labels = labels[:, :6].clamp(max=8)
    assert torch.autograd.gradcheck(lambda x: losses.token_logps(x, labels, 4), (small,))


def test_chunk_constant_matches_the_planner() -> None:
    assert losses.CHUNK_BYTES == LOSS_CHUNK_BYTES
    assert losses.chunk_tokens(151936) == 441 and losses.chunk_tokens(10**12) == 1


def _model_and_pairs() -> tuple[torch.nn.Module, list[tuple[Example, Example]], int]:
    """The tiny model in bf16 and three DPO pairs of different lengths (padding)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from veri_tui.trainer.data import encode_dpo

    tok = AutoTokenizer.from_pretrained(TINY)
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.bfloat16)
    rows = [{"prompt": f"Q{i}: color?", "chosen": " red" * i, "rejected": " b"} for i in (1, 3, 2)]
    return model, [encode_dpo(tok, row, "t", 32) for row in rows], tok.pad_token_id


def test_sft_loss_equals_cross_entropy_on_the_tiny_model() -> None:
    model, pairs, pad = _model_and_pairs()
    rows = [e for pair in pairs for e in pair]
    got = losses.sft_loss_sum(model, rows, pad, torch.device("cpu"))
    grads_got = torch.autograd.grad(got, list(model.parameters()))
    b = collate(rows, pad)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    want = F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        b["labels"][:, 1:].flatten(),
        ignore_index=IGNORE,
        reduction="sum",
    )
    grads_want = torch.autograd.grad(want, list(model.parameters()))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-4)
    for g, w in zip(grads_got, grads_want, strict=True):
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=1e-4)


def test_dpo_loss_and_reward_sums() -> None:
    model, pairs, pad = _model_and_pairs()
    gen = torch.Generator().manual_seed(3)
    ref_logps = torch.randn(2 * len(pairs), generator=gen) - 20
    beta = 0.1
    loss, sums = losses.dpo_loss_sum(
        model, pairs, pad, torch.device("cpu"), beta, lambda b: ref_logps
    )
    b = collate([c for c, _ in pairs] + [r for _, r in pairs], pad)
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    pol = reference_logps(logits, b["labels"]).sum(-1)
    n = len(pairs)
    chosen = beta * (pol[:n] - ref_logps[:n])
    rejected = beta * (pol[n:] - ref_logps[n:])
    want = -F.logsigmoid(chosen - rejected).sum()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    assert sums.dtype == torch.float64 and not sums.requires_grad
    expect = [chosen.sum(), rejected.sum(), (chosen > rejected).sum()]
    torch.testing.assert_close(sums.float(), torch.stack(expect).float(), rtol=1e-5, atol=1e-5)


MEASURE = """
import json, sys, torch
from pathlib import Path
from veri_tui.trainer.losses import token_logps
def rss(key):
    line = [x for x in Path('/proc/self/status').read_text().splitlines() if x.startswith(key)]
    return int(line[0].split()[1]) * 1024
v, t, chunk = 32000, 4096, 512
logits = torch.randn(1, t, v, dtype=torch.bfloat16).requires_grad_()
labels = torch.randint(0, v, (1, t))
base = rss('VmRSS')
token_logps(logits, labels, chunk).sum().backward()
print(json.dumps({"peak": rss('VmHWM') - base, "grad": logits.grad.nbytes}))
"""


@pytest.mark.timeout(120)
def test_at_most_one_fp32_chunk_beside_the_gradient() -> None:
    """Peak RSS above the bf16 logits: their bf16 gradient plus one fp32 chunk (62.5 MiB here);
    a full fp32 copy would be 500 MiB. (Chunks under glibc's 32 MiB mmap threshold come from
    the heap, whose freed blocks inflate RSS; the trainer's chunks are 256 MiB.)"""
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    chunk_bytes = 4 * 32000 * 512
    extra = got["peak"] - got["grad"]
    assert extra < 1.5 * chunk_bytes, (extra, chunk_bytes)
