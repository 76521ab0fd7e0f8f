"""The bf16 AdamW's compiled way (torch.compile of adamw_kernel.update_; a Triton kernel on a
GPU) built here by torch.compile's C++ backend: the same graph, so the same bits as the eager
way and the host's C kernel, on whole parameters and on shards that start mid-parameter.

A trial (docs/trials.md): the first compile on a fresh machine takes minutes on 2 loaded
cores; later ones read inductor's cache. The suite keeps tests/trainer/test_adamw.py (the
native and eager ways agree bit for bit) and test_adamw_ranks.py (on two ranks).
"""

from __future__ import annotations

import pytest
import torch

from veri_tui.trainer.adamw import StochasticAdamW
from veri_tui.trainer.adamw_kernel import compiled_update

SHAPES = ((64, 33), (257,), (1000, 3), (70_000,))


def _run(way: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).bfloat16()) for s in SHAPES]
    opt = StochasticAdamW(params, lr=1e-3, weight_decay=0.01, seed=7, way=way)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).bfloat16()
        opt.step()
    return [p.detach().clone() for p in params] + [opt.state[params[0]]["exp_avg_sq"]]


@pytest.mark.trial
@pytest.mark.timeout(1200)
def test_the_compiled_way_makes_the_eager_bits_on_wholes_and_shards() -> None:
    compiled = _run("compiled")
    assert all(torch.equal(x, y) for x, y in zip(compiled, _run("eager"), strict=True))
    assert all(torch.equal(x, y) for x, y in zip(compiled, _run("native"), strict=True))
    # Two regions of one parameter (two ranks' rows), each compiled call with its own start:
    # the whole's update (the kernel's arange plus the start is the index in the parameter).
    total, hyper = 257, torch.tensor([0.999, 0.9, 0.1, 0.999, 0.001, 2.0, 1e-8, -1e-3])
    torch.manual_seed(1)
    init = [torch.randn(total).bfloat16() for _ in range(2)] + [torch.rand(total).bfloat16()]
    grad, skey = torch.randn(total).bfloat16(), torch.tensor(99, dtype=torch.int32)
    update = compiled_update()
    whole = [t.clone() for t in init]
    update(whole[0], grad, whole[1], whole[2], hyper, torch.tensor([0, 5], dtype=torch.int32), skey)
    parts = [t.clone() for t in init]
    for lo, hi in ((0, 129), (129, total)):
        w, m, v = (t[lo:hi] for t in parts)
        keys = torch.tensor([lo, 5], dtype=torch.int32)
        update(w, grad[lo:hi], m, v, hyper, keys, skey)
    assert all(torch.equal(x, y) for x, y in zip(whole, parts, strict=True))
    assert not torch.equal(whole[0], init[0])
