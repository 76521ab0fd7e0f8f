"""The plan's optimizer counts (veri_tui/plan/optimizer_time.py) are the trainer's: ops and
bytes of a step counted as benchmarks/bench_optimizer.py counts them, on a small Qwen3-shaped
model (the benchmark's figures are its 28-layer model's: docs/trainer.md, Optimizer step)."""

from __future__ import annotations

import math
from typing import Any

import bench_optimizer as bench
import pytest
import torch

from veri_tui.plan import optimizer_time as ot
from veri_tui.trainer import adamw, adamw_batch
from veri_tui.trainer.adamw import StochasticAdamW

SMALL = {"hidden_size": 64, "intermediate_size": 128, "head_dim": 16, "vocab_size": 512}


@pytest.fixture(scope="module")
def sizes() -> list[torch.Size]:
    return bench.shapes(3, **SMALL)  # 3 x 11 tensors, the embedding, the final norm


def _counted(opt: Any, elements: int) -> tuple[int, float]:
    opt.step()  # the states
    ops = bench.count_ops(opt.step)
    with bench.ByteCount() as counted:
        opt.step()
    return ops, counted.bytes / elements


def _predicted(way: dict[str, float], sizes: list[torch.Size], batches: int) -> float:
    matrices = sum(1 for s in sizes if len(s) == 2)
    return ot._ops(way, (len(sizes), matrices), batches)


def test_the_eager_batches_and_torch_s_foreach(
    sizes: list[torch.Size], monkeypatch: pytest.MonkeyPatch
) -> None:
    n = sum(s.numel() for s in sizes)
    assert len(sizes) == 35
    monkeypatch.setattr(adamw_batch, "CHUNK", 1 << 14)  # several batches from a small model
    batches = math.ceil(n / adamw_batch.CHUNK)
    ops, per = _counted(StochasticAdamW(bench.make_params(sizes), way="eager"), n)
    assert ops == pytest.approx(_predicted(ot.EAGER, sizes, batches), rel=0.02)
    # The 28-layer model moves 555 (a 2-layer one 522): how many parameters a batch joins.
    assert per == pytest.approx(ot.EAGER["bytes"], rel=0.1)
    fp32 = torch.optim.AdamW(bench.fp32(bench.make_params(sizes)), foreach=True)
    ops, per = _counted(fp32, n)
    assert ops == _predicted(ot.FOREACH, sizes, 0)
    assert per == pytest.approx(ot.FOREACH["bytes"], rel=1e-3)  # and the scalars


def test_the_compiled_way_one_kernel_a_tensor(
    sizes: list[torch.Size], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its ops besides the kernel, with the kernel counted (not compiled here: the trial
    test_adamw_compiled.py compiles it, the benchmark times it)."""
    calls = []
    monkeypatch.setattr(adamw, "compiled_update", lambda: lambda *a: calls.append(a))
    monkeypatch.setattr(adamw, "_get_current_dispatch_mode", lambda: None)
    opt = StochasticAdamW(bench.make_params(sizes), way="compiled")
    opt.step()
    calls.clear()
    ops = bench.count_ops(opt.step) + len(calls)
    assert len(calls) == len(sizes)
    assert ops == _predicted(ot.COMPILED, sizes, 0)


def test_clipping_three_passes_of_the_gradients(sizes: list[torch.Size]) -> None:
    params = bench.make_params(sizes)
    n = sum(p.numel() for p in params)
    ops = bench.count_ops(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0))
    with bench.ByteCount() as counted:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    assert ops == _predicted(ot.CLIP, sizes, 0)
    assert counted.bytes / n == pytest.approx(ot.CLIP["passes"] * 2, rel=0.01)  # bf16
