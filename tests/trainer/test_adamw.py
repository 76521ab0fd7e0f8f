"""The bf16 AdamW's stochastic rounding (veri_tui/trainer/adamw.py): unbiased, small updates land in
expectation, weight decay takes effect, deterministic by seed, the same on any sharding, the
same bits whichever way it runs (the host's C kernel, eager torch ops).

Each "lands" test also runs torch's AdamW on the same bf16 weights (what precision bf16 ran
before, rounding to nearest) and shows the update lost there. The compiled way (torch.compile)
is checked by tests/trainer/test_adamw_compiled.py, a trial: its first compile takes minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from veri_tui.errors import VeriError
from veri_tui.plan import load_job_config, peak
from veri_tui.trainer import adamw, adamw_batch, adamw_native, adamw_regions
from veri_tui.trainer.adamw import StochasticAdamW, make_optimizer
from veri_tui.trainer.adamw_batch import mix32, signed32
from veri_tui.trainer.adamw_kernel import hash_, mix_, round_into_
from veri_tui.trainer.census import Census
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
        round_into_(out, src.clone(), _bits(n, 1))
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
    round_into_(out, src.clone(), _bits(10_000, 2))
    assert torch.equal(out.float(), src)


def _train(opt_cls: type, *, lr: float, decay: float, grad: float, steps: int, way: str = "eager"
           ) -> torch.Tensor:  # fmt: skip
    p = torch.nn.Parameter(torch.ones(20_000, dtype=torch.bfloat16))
    kw = {"seed": 3, "way": way} if opt_cls is StochasticAdamW else {}
    opt = opt_cls([p], lr=lr, weight_decay=decay, **kw)
    for _ in range(steps):
        p.grad = torch.full_like(p, grad)
        opt.step()
    return p.detach().float()


@pytest.mark.parametrize("way", ["native", "eager"])
def test_an_update_below_half_an_ulp_lands_in_expectation(way: str) -> None:
    # A constant gradient makes Adam's step lr; here a tenth of a bf16 step of the weight.
    lr, steps = 0.1 * ONE_ULP / 2, 30  # below 1.0 the step is 2^-8: lr is 0.1 of it
    want = 1.0 - lr * steps
    rounded = _train(StochasticAdamW, lr=lr, decay=0.0, grad=1.0, steps=steps, way=way)
    assert rounded.mean().item() == pytest.approx(want, abs=2e-4)
    nearest = _train(torch.optim.AdamW, lr=lr, decay=0.0, grad=1.0, steps=steps)
    assert torch.all(nearest == 1.0)  # round to nearest: not one weight moved


@pytest.mark.parametrize("way", ["native", "eager"])
def test_weight_decay_takes_effect(way: str) -> None:
    # No gradient signal (m = v = 0): only the decay, 1e-4 of the weight a step.
    lr, decay, steps = 1e-3, 0.1, 40
    want = (1 - lr * decay) ** steps
    rounded = _train(StochasticAdamW, lr=lr, decay=decay, grad=0.0, steps=steps, way=way)
    assert rounded.mean().item() == pytest.approx(want, abs=2e-4)
    assert rounded.mean().item() < 1 - 0.5 * (1 - want)
    nearest = _train(torch.optim.AdamW, lr=lr, decay=decay, grad=0.0, steps=steps)
    assert torch.all(nearest == 1.0)


SHAPES = ((64, 33), (257,), (1000, 3), (3, 7), (70_000,))


def _run(seed: int, steps: int = 3, way: str = "eager", threads: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).bfloat16()) for s in SHAPES]
    opt = StochasticAdamW(params, lr=1e-3, weight_decay=0.01, seed=seed, way=way)
    g = torch.Generator().manual_seed(5)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(steps):
            for p in params:
                p.grad = torch.randn(p.shape, generator=g).bfloat16()
            opt.step()
    finally:
        torch.set_num_threads(before)
    states = [opt.state[p][k] for p in params for k in ("exp_avg", "exp_avg_sq")]
    return [p.detach().clone() for p in params] + states


def test_deterministic_given_the_seed() -> None:
    a, b, c = _run(seed=7), _run(seed=7), _run(seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_every_way_makes_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's C kernel (one thread, two threads splitting parameters mid-way), eager
    batches of 2^22 elements and of 100 (parameters joined and cut across batches): the
    same weights and moments, bit for bit."""
    assert adamw_native.load() is not None, adamw_native.why  # this machine has a compiler
    eager = _run(seed=7)
    for got in (_run(seed=7, way="native"), _run(seed=7, way="native", threads=2)):
        assert all(torch.equal(x, y) for x, y in zip(eager, got, strict=True))
    monkeypatch.setattr(adamw_batch, "CHUNK", 100)
    assert all(torch.equal(x, y) for x, y in zip(eager, _run(seed=7), strict=True))
    assert not torch.equal(eager[0], _run(seed=7, steps=2)[0])  # it trains


def test_the_hash_python_and_torch_agree_and_its_bits_are_even() -> None:
    x = torch.randint(-(2**31), 2**31 - 1, (4096,), dtype=torch.int32)
    assert mix_(x.clone()).tolist() == [signed32(mix32(int(v))) for v in x.tolist()]
    n = 1 << 16
    bits = hash_(torch.arange(n, dtype=torch.int32), signed32(mix32(12345)))
    for part in (bits & 0xFFFF, (bits >> 16) & 0xFFFF):  # w's and m's 16 bits
        counts = torch.bincount(part >> 12, minlength=16).double()  # 16 bins of 4,096 expected
        chi2 = ((counts - n / 16) ** 2 / (n / 16)).sum().item()
        assert chi2 < 45, chi2  # 15 degrees of freedom: p < 1e-4 above 45
    lo, hi = (bits & 0xFFFF).double(), ((bits >> 16) & 0xFFFF).double()
    assert abs(torch.corrcoef(torch.stack([lo, hi]))[0, 1].item()) < 0.02
    other = hash_(torch.arange(n, dtype=torch.int32), signed32(mix32(12346)))
    assert (other == bits).float().mean().item() < 1e-3  # another step's key: other bits


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
    assert torch.equal(p, q)


@pytest.mark.parametrize("cut", [0, 1, 100, 129, 256])
def test_a_shard_rounds_as_the_whole(monkeypatch: pytest.MonkeyPatch, cut: int) -> None:
    """Two regions of a parameter (two FSDP2 ranks' rows) get exactly the update the whole
    gets on one rank (DDP): the bits depend on the element's index in the whole parameter.
    Pieces of 64 elements (a parameter's index is hashed mod 2^31, piece by piece), so
    regions start inside a piece."""
    monkeypatch.setattr(adamw_regions, "PIECE", 64)
    total = 257
    torch.manual_seed(1)
    init = [torch.randn(total).bfloat16() for _ in range(2)] + [torch.rand(total).bfloat16()]
    grad = torch.randn(total).bfloat16()

    def update(lo: int, hi: int, tensors: list[torch.Tensor], way: str) -> None:
        opt = StochasticAdamW([torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))],
                              lr=1e-3, weight_decay=0.01, seed=42, way=way)  # fmt: skip
        w, m, v = (t[lo:hi] for t in tensors)
        state = {"exp_avg": m, "exp_avg_sq": v}
        param = torch.nn.Parameter(w)
        param.grad = grad[lo:hi]
        monkeypatch.setattr(adamw_regions, "local_region", lambda t: (t, lo))
        pieces = opt._regions.pieces(param, state, 5, torch.device("cpu"), way)
        hyper = adamw.hyper_values(opt.param_groups[0], 3)
        with torch.no_grad():
            if way == "native":
                opt._host.run(pieces, hyper, adamw_regions.key(42, 3))
            else:
                adamw_batch.run_batched(pieces, hyper, adamw_regions.key(42, 3))

    for way in ("native", "eager"):
        whole = [t.clone() for t in init]
        update(0, total, whole, way)
        parts = [t.clone() for t in init]
        for lo, hi in ((0, cut), (cut, total)):
            if hi > lo:
                update(lo, hi, parts, way)
        assert all(torch.equal(x, y) for x, y in zip(whole, parts, strict=True)), way
        assert not torch.equal(whole[0], init[0])


def test_the_eager_step_holds_what_the_plan_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The eager way's temporaries, counted op by op (veri_tui/trainer/census.py): at most
    STEP_TEMP_BYTES per element of one batch, and all of it (peak.py's SR_STEP_TEMP_BYTES);
    the host's C kernel makes none (beside the step counters' few bytes)."""
    monkeypatch.setattr(adamw_batch, "CHUNK", 1 << 14)
    for way, want in (("eager", adamw.STEP_TEMP_BYTES * (1 << 14)), ("native", 0)):
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s).bfloat16()) for s in SHAPES]
        opt = StochasticAdamW(params, lr=1e-3, seed=1, way=way)
        for _ in range(2):  # the first step makes the states
            for p in params:
                p.grad = torch.randn_like(p)
            held = [t for p in params for t in (p, p.grad, *opt.state[p].values())]
            with Census(exclude=held) as census:
                opt.step()
        assert want <= census.peak() <= want + 1024, way


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
    assert peak.SR_COMPILE_MIN_PARAMETERS == adamw.COMPILE_MIN_PARAMETERS


def test_without_a_compiler_the_host_runs_eagerly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No C compiler, or one that fails: no kernel, the reason kept, the eager way picked.
    With one, the kernel is built into the user's cache and loaded from there after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    adamw_native.load.cache_clear()
    try:
        monkeypatch.setattr(adamw_native.shutil, "which", lambda _: None)
        assert adamw_native.load() is None
        assert adamw_native.why == "no C compiler ($CC, cc, gcc or clang)"
        opt = StochasticAdamW([torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))])
        assert opt.pick_way(torch.device("cpu")) == "eager"
        monkeypatch.undo()
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        bad = tmp_path / "bad.c"
        bad.write_text("this is not C\n")
        monkeypatch.setattr(adamw_native, "SOURCE", bad)
        adamw_native.load.cache_clear()
        assert adamw_native.load() is None and "failed" in adamw_native.why
        assert list((tmp_path / "veri-tui" / "kernels").iterdir()) == []  # nothing half-built
        monkeypatch.undo()
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        adamw_native.load.cache_clear()
        assert adamw_native.load() is not None
        assert [p.suffix for p in (tmp_path / "veri-tui" / "kernels").iterdir()] == [".so"]
    finally:
        adamw_native.load.cache_clear()
