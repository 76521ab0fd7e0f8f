"""The bf16 AdamW on 2 real ranks (torchrun, gloo): DDP replicas stay bit-identical, and an
FSDP2 shard gets the update the whole parameter gets, also with the update overlapped with
the next forward (cpu_offload's way, veri_tui/trainer/adamw_overlap.py).

Run as a script under torchrun, each rank trains the same small bf16 model on its own
batches for STEPS steps twice, under DDP and under FSDP2 (`fully_shard`, dim-0 shards of
uneven size: 37 rows over 2 ranks), both with veri_tui/trainer/adamw.py's StochasticAdamW, and
writes what it holds: under DDP its whole weights (which must equal the other rank's:
rounding by a per-rank random stream would drift them apart), under FSDP2 its shards
gathered whole. The reduced gradients are bit-equal in both (2 ranks: one addition), so
the two layouts must end with bit-equal weights. Both ways the update runs on the host (the
C kernel, eager torch ops) make them, and the same bits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
WAYS = ("native", "eager")  # the host's (the compiled way: tests/trainer/test_adamw_compiled.py)


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 37), torch.nn.Tanh(), torch.nn.Linear(37, 5))
    return net.to(torch.bfloat16)


def _train(
    net: Any, params: list[Any], rank: int, way: str, units: list[Any] | None = None
) -> None:
    """STEPS steps; with `units` (FSDP2 units in forward order) the update overlapped with
    the next forward, unit by unit (veri_tui/trainer/adamw_overlap.py)."""
    import torch

    from veri_tui.trainer.adamw import StochasticAdamW
    from veri_tui.trainer.adamw_overlap import overlap_forward, settle

    opt = StochasticAdamW(params, lr=1e-3, weight_decay=0.1, seed=42, way=way)
    if units is not None:
        overlap_forward(net, units, opt)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for _ in range(STEPS):
        x = torch.randn(8, 16, generator=g).bfloat16()
        net(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    settle(opt)


def _ranks(out: Path) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    got = {}
    for way in WAYS:
        ddp = DDP(_model())
        _train(ddp, list(ddp.parameters()), rank, way)
        named = ddp.module.named_parameters()
        got[f"ddp-{way}"] = {n: p.detach().float().flatten().tolist() for n, p in named}
        net = _model()
        fully_shard(net, mesh=init_device_mesh("cpu", (2,)))
        _train(net, list(net.parameters()), rank, way)
        named = net.named_parameters()
        got[f"fsdp-{way}"] = {n: p.full_tensor().float().flatten().tolist() for n, p in named}
    # cpu_offload's overlap: each linear its own FSDP2 unit, whose all-gather (in FSDP2's
    # pre-forward hook) must read the shard its update wrote.
    net = _model()
    mesh = init_device_mesh("cpu", (2,))
    for unit in (net[0], net[2], net):
        fully_shard(unit, mesh=mesh)
    _train(net, list(net.parameters()), rank, "native", units=[net[0], net[2]])
    named = net.named_parameters()
    got["fsdp-overlap"] = {n: p.full_tensor().float().flatten().tolist() for n, p in named}
    # Each unit's pre-forward hooks, in the order they run: the overlap's wait first.
    got["hooks"] = [
        [getattr(h, "__qualname__", type(h).__name__) for h in unit._forward_pre_hooks.values()]
        for unit in (net, net[0], net[2])
    ]
    (out / f"rank-{rank}.json").write_text(json.dumps(got))
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ddp_replicas_agree_and_fsdp2_shards_update_as_the_whole(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
    proc = subprocess.run(
        [*cmd, str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    for way in WAYS:
        assert r0[f"ddp-{way}"] == r1[f"ddp-{way}"]  # bit-identical replicas
        # shards rounded as the whole parameters, by either way
        assert r0[f"fsdp-{way}"] == r1[f"fsdp-{way}"] == r0[f"ddp-{way}"] == r0["ddp-native"]
    assert r0["fsdp-overlap"] == r1["fsdp-overlap"] == r0["ddp-native"]
    for hooks in r0["hooks"]:  # the wait ahead of FSDP2's pre-forward (its shard's copy-in)
        assert hooks[0].startswith(("install.", "_unit_wait.")), hooks
        assert any("pre_forward" in h for h in hooks[1:]), hooks
    init = {n: p.float().flatten().tolist() for n, p in _model().named_parameters()}
    assert all(r0["ddp-native"][n] != init[n] for n in init)  # it trained


if __name__ == "__main__":
    _ranks(Path(sys.argv[1]))
    # The work is done and written: leave without the interpreter's finalization, where a
    # gloo rank can abort after a clean destroy_process_group (SIGABRT, "terminate called
    # without an active exception"; docs/reliability.md, Known defects).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
