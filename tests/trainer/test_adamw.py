"""The bf16 AdamW's stochastic rounding (veri_tui/trainer/adamw.py): unbiased, small updates land in
expectation, weight decay takes effect, deterministic by seed, the same on any sharding.

Each "lands" test also runs torch's AdamW on the same bf16 weights (what precision bf16 ran
before, rounding to nearest) and shows the update lost there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from veri_tui.errors import VeriError
from veri_tui.plan import load_job_config, peak
from veri_tui.trainer import adamw
from veri_tui.trainer.adamw import StochasticAdamW, make_optimizer, stochastic_round_, update_region
from veri_tui.trainer.config import from_spec

ONE_ULP = 2.0**-7  # a bf16 step at 1.0 (8 bits of significand)


def _bits(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 1 << 16, (n,), generator=g, dtype=torch.int32)


def _neighbours(value: float) -> tuple[float, float]:
    """The bf16 values either side of `value` (toward zero, away from zero)."""
    x = torch.tensor([value], dtype=torch.float32).view(torch.int32)
    down = (x & -(1 << 16)).view(torch.float32)
    up = ((x & -(1 << 16)) + (1 << 16)).view(torch.float32)
    return down.item(), up.item()


def test_rounding_is_unbiased_and_lands_on_a_neighbour() -> None:
    n = 200_000
    for value in (1.0 + 0.1 * ONE_ULP, -(3.0 + 0.37 * 4 * ONE_ULP), 0.02 + 1e-6, 1e-30):
        src = torch.full((n,), value, dtype=torch.float32)
        out = torch.empty(n, dtype=torch.bfloat16)
        stochastic_round_(out, src, _bits(n, 1))
        got = out.float()
        down, up = _neighbours(value)
        assert set(got.tolist()) <= {down, up}
        # Unbiased: the mean is the fp32 value to within 5 sampling errors (ulp / 2 sqrt n).
        err = abs(up - down) / (2 * n**0.5)
        assert abs(got.double().mean().item() - src[0].item()) < 5 * err, value
    assert torch.tensor(1.0 + 0.1 * ONE_ULP).bfloat16().item() == 1.0  # nearest loses it


def test_exact_values_stay_exact() -> None:
    src = torch.randn(10_000).bfloat16().float()
    out = torch.empty(10_000, dtype=torch.bfloat16)
    stochastic_round_(out, src, _bits(10_000, 2))
    assert torch.equal(out.float(), src)


def _train(opt_cls: type, *, lr: float, decay: float, grad: float, steps: int) -> torch.Tensor:
    p = torch.nn.Parameter(torch.ones(20_000, dtype=torch.bfloat16))
    kw = {"seed": 3} if opt_cls is StochasticAdamW else {}
    opt = opt_cls([p], lr=lr, weight_decay=decay, **kw)
    for _ in range(steps):
        p.grad = torch.full_like(p, grad)
        opt.step()
    return p.detach().float()


def test_an_update_below_half_an_ulp_lands_in_expectation() -> None:
    # A constant gradient makes Adam's step lr; here a tenth of a bf16 step of the weight.
    lr, steps = 0.1 * ONE_ULP / 2, 30  # below 1.0 the step is 2^-8: lr is 0.1 of it
    want = 1.0 - lr * steps
    rounded = _train(StochasticAdamW, lr=lr, decay=0.0, grad=1.0, steps=steps)
    assert rounded.mean().item() == pytest.approx(want, abs=2e-4)
    nearest = _train(torch.optim.AdamW, lr=lr, decay=0.0, grad=1.0, steps=steps)
    assert torch.all(nearest == 1.0)  # round to nearest: not one weight moved


def test_weight_decay_takes_effect() -> None:
    # No gradient signal (m = v = 0): only the decay, 1e-4 of the weight a step.
    lr, decay, steps = 1e-3, 0.1, 40
    want = (1 - lr * decay) ** steps
    rounded = _train(StochasticAdamW, lr=lr, decay=decay, grad=0.0, steps=steps)
    assert rounded.mean().item() == pytest.approx(want, abs=2e-4)
    assert rounded.mean().item() < 1 - 0.5 * (1 - want)
    nearest = _train(torch.optim.AdamW, lr=lr, decay=decay, grad=0.0, steps=steps)
    assert torch.all(nearest == 1.0)


def _run(seed: int, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).bfloat16()) for s in ((64, 33), (257,))]
    opt = StochasticAdamW(params, lr=1e-3, weight_decay=0.01, seed=seed)
    g = torch.Generator().manual_seed(5)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).bfloat16()
        opt.step()
    return [p.detach().clone() for p in params] + [opt.state[params[0]]["exp_avg_sq"]]


def test_deterministic_given_the_seed() -> None:
    a, b, c = _run(seed=7), _run(seed=7), _run(seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_matches_torch_adamw_on_fp32_parameters() -> None:
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(300, 7))
    q = torch.nn.Parameter(p.detach().clone())
    ours = StochasticAdamW([p], lr=1e-2, weight_decay=0.1)
    theirs = torch.optim.AdamW([q], lr=1e-2, weight_decay=0.1)
    for _ in range(4):
        g = torch.randn_like(p)
        p.grad, q.grad = g.clone(), g.clone()
        ours.step(), theirs.step()
    assert torch.allclose(p, q, rtol=0, atol=1e-7)


@pytest.mark.parametrize("cut", [0, 1, 100, 129, 256])
def test_a_shard_rounds_as_the_whole(monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """Two regions of a parameter (two FSDP2 ranks' rows) get exactly the update the whole
    gets on one rank (DDP): the bits depend on the element's index in the whole parameter.
    Small chunks here, so regions start inside a chunk."""
    monkeypatch.setattr(adamw, "CHUNK", 64)
    total = 257
    torch.manual_seed(1)
    init = [torch.randn(total).bfloat16() for _ in range(2)] + [torch.rand(total).bfloat16()]
    grad = torch.randn(total).bfloat16()
    group = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    key, gen = (42, 3, 5), torch.Generator()
    whole = [t.clone() for t in init]
    update_region(whole[0], grad, whole[1], whole[2], start=0, total=total, key=key,
                  group=group, generator=gen)  # fmt: skip
    parts = [t.clone() for t in init]
    for lo, hi in ((0, cut), (cut, total)):
        w, m, v = (t[lo:hi] for t in parts)
        update_region(w, grad[lo:hi], m, v, start=lo, total=total, key=key,
                      group=group, generator=gen)  # fmt: skip
    assert all(torch.equal(x, y) for x, y in zip(whole, parts, strict=True))
    assert not torch.equal(whole[0], init[0])


def test_the_run_picks_the_rounding_optimizer_for_bf16_weights_only() -> None:
    bf16 = [torch.nn.Parameter(torch.zeros(3, dtype=torch.bfloat16))]
    fp32 = [torch.nn.Parameter(torch.zeros(3))]
    assert isinstance(make_optimizer(bf16, 1e-4, 0.0, 42), StochasticAdamW)
    assert type(make_optimizer(fp32, 1e-4, 0.0, 42)) is torch.optim.AdamW


def test_adam_betas_reach_both_optimizers(tmp_path: Path) -> None:
    hyper = {"adam_beta1": "0.8", "adam_beta2": "0.95"}
    cfg = from_spec({"method": "sft_text", "model_path": "m", "dataset": "d.jsonl",
                     "hyperparameters": hyper}, tmp_path)  # fmt: skip
    assert (cfg.adam_beta1, cfg.adam_beta2) == (0.8, 0.95)
    for dtype in (torch.bfloat16, torch.float32):
        params = [torch.nn.Parameter(torch.zeros(3, dtype=dtype))]
        opt = make_optimizer(params, 1e-4, 0.0, 42, cfg.adam_beta2, cfg.adam_beta1)
        assert opt.param_groups[0]["betas"] == (0.8, 0.95), dtype
    for key in ("adam_beta1", "adam_beta2"):  # the planner checks the schema's bound
        with pytest.raises(VeriError, match=f"{key}: must be below 1 \\(got 1\\)"):
            load_job_config(sets=[f"{key}=1"])


def test_the_planner_counts_the_step_temporary_the_optimizer_makes() -> None:
    assert peak.SR_CHUNK == adamw.CHUNK
    assert peak.SR_STEP_TEMP_BYTES == adamw.STEP_TEMP_BYTES
