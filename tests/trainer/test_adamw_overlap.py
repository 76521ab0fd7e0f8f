"""cpu_offload's host step beside the next forward (veri_tui/trainer/adamw_overlap.py), in one
process on the host's C kernel: the same bits as the update in place, the step returning
before the update is done, each unit's forward run only once its own update is, and a failed
update raised on the main thread. tests/trainer/test_adamw_ranks.py checks it under FSDP2 on
2 ranks (each unit's all-gather reads its updated shard)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from torch import nn

from veri_tui.trainer import adamw_native
from veri_tui.trainer.adamw import StochasticAdamW
from veri_tui.trainer.adamw_overlap import overlap_forward, settle

pytestmark = pytest.mark.skipif(adamw_native.load() is None, reason="no C compiler")


class Net(nn.Module):
    """A root's own parameters (in and out) around three layers: four overlap units."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp, self.out = nn.Linear(16, 32), nn.Linear(32, 4)
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.out(x)


def _batch(step: int) -> torch.Tensor:
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(step)).bfloat16()


def _step(net: Net, opt: Any, step: int) -> None:
    net(_batch(step)).float().square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _pair() -> tuple[Net, StochasticAdamW, Net, StochasticAdamW]:
    """A net updated in place, and the same net whose update is overlapped."""
    kw: dict[str, Any] = {"lr": 1e-2, "weight_decay": 0.1, "seed": 7, "way": "native"}
    a, b = Net(), Net()
    opt_a = StochasticAdamW(a.parameters(), **kw)
    opt_b = StochasticAdamW(b.parameters(), **kw)
    overlap_forward(b, list(b.layers), opt_b)
    return a, opt_a, b, opt_b


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_overlapped_update_makes_the_same_bits() -> None:
    a, opt_a, b, opt_b = _pair()
    start = [p.clone() for p in a.parameters()]
    for step in range(4):
        _step(a, opt_a, step)
        _step(b, opt_b, step)
    settle(opt_b)
    assert _same(a, b)
    assert all(not torch.equal(p, q) for p, q in zip(a.parameters(), start, strict=True))
    assert opt_b.state_dict()["state"].keys() == opt_a.state_dict()["state"].keys()


def test_step_returns_first_and_each_unit_waits_for_its_own_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host kernel's call for unit k (the k-th) waits at gate k, which opens 0.3 s
    after unit k - 1's forward started: a unit whose forward ran before its own update was
    done is seen."""
    a, opt_a, b, opt_b = _pair()
    _step(a, opt_a, 0)
    gates, calls, run = [threading.Event() for _ in range(5)], [0], opt_b._host.run

    def gated(*args: Any) -> None:
        calls[0] += 1
        gates[calls[0] - 1].wait()
        run(*args)

    monkeypatch.setattr(opt_b._host, "run", gated)
    before = [p.clone() for p in b.parameters()]
    _step(b, opt_b, 0)  # returns with the host kernel held at gate 0
    overlap = opt_b.overlap
    assert overlap is not None and overlap.pending()
    assert all(torch.equal(p, q) for p, q in zip(b.parameters(), before, strict=True))
    seen: list[bool] = []

    def note(unit: int) -> None:  # runs after the unit's wait (registered after it)
        seen.append(overlap.finished(unit))
        threading.Timer(0.3, gates[unit + 1].set).start()

    for unit, module in enumerate([b, *b.layers]):
        module.register_forward_pre_hook(lambda *_, u=unit: note(u))
    threading.Timer(0.3, gates[0].set).start()
    b(_batch(1))  # the forward waits, unit by unit
    assert calls[0] == 4 and seen == [True] * 4 and not overlap.pending()
    assert _same(a, b)


def test_a_failed_update_is_raised_where_the_forward_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, _, b, opt_b = _pair()

    def fail(*_: Any) -> None:
        raise RuntimeError("host kernel failed")

    monkeypatch.setattr(opt_b._host, "run", fail)
    _step(b, opt_b, 0)
    with pytest.raises(RuntimeError, match="host kernel failed"):
        b(_batch(1))
    settle(opt_b)  # raised once
