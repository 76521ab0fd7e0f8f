"""Collective bus bandwidth on a job's nodes: the fleet probe's rank program, under torchrun.

    python -m torch.distributed.run --nnodes N --node-rank K --master-addr A --master-port P \
        --nproc-per-node G -m veri_tui.trainer.probe [--sizes 1048576,4194304] [--iters 3]

Measured the way nccl-tests measures (S bytes is the whole buffer: all_reduce's in and out,
all_gather's output, reduce_scatter's input; algbw = S / t; busbw = algbw x 2(n-1)/n for
all_reduce and (n-1)/n for the other two, so every kind reads as the link's speed):

- `all`: every rank together;
- `node`: the ranks of each node among themselves (several nodes, several ranks a node);
- `across`: local rank 0 of every node: the network between the nodes (several nodes);
- `pair`: node k with node k+1, in turn (three or more nodes): a slow link or node shows in
  the two pairs it is part of.

Every rank also times how long it waits inside each collective: the node the others wait for
spends the least time there. Rank 0 prints one line `VERI_PROBE {json}`; what is slow is
judged by the launcher (veri_tui/launch/probe). The NCCL backend on CUDA, gloo on CPU tensors.

`VERI_PROBE_DELAY=K:S` (test-only, like veri_tui/trainer/faults.py): the ranks of node K sleep S
seconds before each timed collective: a stand-in for a slow GPU or host.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
CPU_SIZES = (1 << 18, 1 << 20, 1 << 22)
GPU_SIZES = (1 << 20, 1 << 26, 1 << 28)
MARK = "VERI_PROBE "


def bus_factor(collective: str, n: int) -> float:
    """busbw / algbw for a collective over n ranks (nccl-tests' PERFORMANCE.md)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def delay_of(env: str | None, node: int) -> float:
    """Seconds node ``node`` sleeps before each timed collective under VERI_PROBE_DELAY."""
    if not env:
        return 0.0
    where, _, seconds = env.partition(":")
    try:
        return float(seconds) if int(where) == node else 0.0
    except ValueError:
        raise SystemExit(f"VERI_PROBE_DELAY={env!r}: expected NODE:SECONDS, e.g. 1:0.05") from None


def _op(collective: str, n: int, nbytes: int, device: torch.device, group: Any
        ) -> Callable[[], None]:  # fmt: skip
    """One ``collective`` (all_reduce, all_gather, reduce_scatter) on an S-byte buffer over
    ``n`` ranks of ``group``."""
    numel = max(n, nbytes // 4 // n * n)  # float32, divisible by n
    whole = torch.ones(numel, device=device)
    part = torch.ones(numel // n, device=device)
    if collective == "all_reduce":
        return lambda: dist.all_reduce(whole, group=group)
    if collective == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(whole, part, group=group)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return lambda: scatter(part, whole, group=group)


class Probe:
    """This rank's measurements, in the same order on every rank."""

    def __init__(self, device: torch.device, node: int, delay: float, iters: int) -> None:
        self.device, self.node, self.delay, self.iters = device, node, delay, iters
        self.results: list[dict[str, Any]] = []
        self.mine: dict[int, tuple[float, float]] = {}  # result index -> (loop s, inside s)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def measure(self, scope: str, members: list[int], nodes: list[int], kind: str,
                nbytes: int, group: Any) -> None:  # fmt: skip
        """Time ``kind`` at ``nbytes`` over the ranks ``members`` (of ``nodes``); every rank
        records the result, the members also their own times."""
        index = len(self.results)
        self.results.append({"scope": scope, "nodes": nodes, "ranks": members, "kind": kind,
                             "bytes": nbytes})  # fmt: skip
        if dist.get_rank() not in members:
            return
        op = _op(kind, len(members), nbytes, self.device, group)
        op()  # warm-up: connections, buffers
        self.sync()
        dist.barrier(group=group)
        inside = 0.0
        start = time.perf_counter()
        for _ in range(self.iters):
            if self.delay:
                time.sleep(self.delay)
            t0 = time.perf_counter()
            op()
            self.sync()
            inside += time.perf_counter() - t0
        self.mine[index] = ((time.perf_counter() - start) / self.iters, inside / self.iters)


def run(sizes: list[int], iters: int) -> dict[str, Any] | None:
    """Every measurement; rank 0's record (None on the other ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    nodes = world // per_node
    node = rank // per_node
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK") or 0))
    probe = Probe(device, node, delay_of(os.environ.get("VERI_PROBE_DELAY"), node), iters)
    everyone = list(range(world))
    for kind in KINDS:
        for nbytes in sizes:
            probe.measure("all", everyone, list(range(nodes)), kind, nbytes, None)
    if nodes > 1 and per_node > 1:
        groups = [list(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]
        made = [dist.new_group(g) for g in groups]  # every rank makes every group
        for k, members in enumerate(groups):  # each node measures itself, all at once
            for kind in KINDS:
                probe.measure("node", members, [k], kind, sizes[-1], made[k])
    if nodes > 1:
        leaders = [k * per_node for k in range(nodes)]
        group = dist.new_group(leaders) if per_node > 1 else None
        if per_node > 1:
            for kind in KINDS:
                for nbytes in sizes:
                    probe.measure("across", leaders, list(range(nodes)), kind, nbytes, group)
        if nodes > 2:
            pairs = [(k, (k + 1) % nodes) for k in range(nodes)]
            made_pairs = [dist.new_group([leaders[a], leaders[b]]) for a, b in pairs]
            for (a, b), pg in zip(pairs, made_pairs, strict=True):
                probe.measure("pair", [leaders[a], leaders[b]], [a, b], "all_reduce",
                              sizes[-1], pg)  # fmt: skip
                dist.barrier()  # one pair at a time: they share nodes
    gathered: list[Any] = [None] * world if rank == 0 else []
    dist.gather_object(probe.mine, gathered if rank == 0 else None, dst=0)
    if rank != 0:
        return None
    return _record(probe.results, gathered, nodes, per_node, str(device.type), iters)


def _record(results: list[dict[str, Any]], times: list[dict[int, tuple[float, float]]],
            nodes: int, per_node: int, device: str, iters: int) -> dict[str, Any]:  # fmt: skip
    """The results with their times: the slowest member's loop for the bandwidth, and every
    member's wait inside the collective."""
    for index, res in enumerate(results):
        loops = [times[r][index][0] for r in res["ranks"]]
        t = max(loops)
        algbw = res["bytes"] / t / 1e9 if t > 0 else 0.0
        res.update(
            time_s=t,
            algbw_gbs=algbw,
            busbw_gbs=algbw * bus_factor(res["kind"], len(res["ranks"])),
            inside_s=[times[r][index][1] for r in res["ranks"]],
        )
    return {"probe": 1, "backend": dist.get_backend(), "device": device, "nodes": nodes,
            "ranks_per_node": per_node, "world_size": nodes * per_node, "iters": iters,
            "results": results}  # fmt: skip


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m veri_tui.trainer.probe", description=__doc__.split("\n")[0]
    )
    p.add_argument("--sizes", help="buffer sizes in bytes, comma-separated (default: by device)")
    p.add_argument("--iters", type=int, default=0, help="timed collectives per size")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Join the group torchrun describes, measure, print rank 0's record; exit status."""
    args = _parse(argv)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK") or 0))
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
        sizes = sorted(sizes or (GPU_SIZES if cuda else CPU_SIZES))
        record = run(sizes, args.iters or (5 if cuda else 3))
        if record is not None:
            print(MARK + json.dumps(record), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
