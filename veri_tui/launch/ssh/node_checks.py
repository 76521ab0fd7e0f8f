"""Each node of a multi-node job against what it must hold: host memory and disk.

The one-host launch refuses a job its host cannot hold (ssh/preflight.py check_memory,
check_disk); a multi-node job checks every node the same way, in parallel, before anything
is created on any of them. Host memory is the plan's `host_bytes_per_node` on each node.
Disk differs by node: in a multi-node job checkpoints are rank-local (trainer/checkpoint.py),
each rank saving its own DCP file in its node's folder, so under FSDP2 (zero_stage 2 or 3) a
node holds its ranks' shards, its share of a checkpoint, while under DDP (zero_stage 0)
every rank saves the whole model and optimizer, so a node holds that once per rank. The
artifact is written by rank 0 alone, on node 0.
"""

from __future__ import annotations

from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.preflight import Preflight, check_disk, check_memory
from veri_tui.plan.disk import DiskEstimate

Row = tuple[str, bool, str]


def node_disk(
    disk: DiskEstimate, zero_stage: int, nodes: int, per_node: int, node: int
) -> DiskEstimate:
    """What node `node` of `nodes` (`per_node` ranks each) writes of the plan's `disk`."""
    if zero_stage == 0:
        checkpoint = disk.checkpoint_bytes * per_node  # every rank a whole copy
    else:
        checkpoint = -(-disk.checkpoint_bytes * per_node // (nodes * per_node))  # its share
    return disk._replace(
        checkpoint_bytes=checkpoint, artifact_bytes=disk.artifact_bytes if node == 0 else 0
    )


def node_rows(
    conns: list[Connection], pfs: list[Preflight], plan: Any, output: str | None,
    labels: list[str],
) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
    """Every node's host-memory and disk rows (labelled `labels[k]`) and their refusals,
    each node checked in its own thread (the disk check runs a command there)."""
    from veri_tui.launch.ssh.multinode import in_parallel

    nodes, stage = len(conns), int(plan.resolved_parallelism["zero_stage"])
    per_node = max(1, int(plan.resolved_parallelism["data_parallel_size"]) // nodes)

    def check(k: int) -> tuple[list[Row], list[Refusal]]:
        rows, refused = [], []
        disk = node_disk(plan.disk, stage, nodes, per_node, k)
        checks = (
            lambda: check_memory(pfs[k], plan),
            lambda: check_disk(conns[k], pfs[k], disk, output if k == 0 else None),
        )
        for run in checks:
            try:
                key, ok, detail = run()
                rows.append((f"{labels[k]} {key}", ok, detail))
            except VeriError as exc:
                refused += [Refusal(e.key, f"{labels[k]}: {e.message}") for e in exc.errors]
        return rows, refused

    rows: list[Row] = []
    refused: list[Refusal] = []
    for got in in_parallel(check, list(range(nodes))):
        if isinstance(got, Exception):
            raise got
        rows += got[0]
        refused += got[1]
    return rows, refused


def check_nodes(
    conns: list[Connection], pfs: list[Preflight], plan: Any, output: str | None,
    hosts: list[str],
) -> None:  # fmt: skip
    """Refuse (VeriError, every node's refusals together) a job some node cannot hold."""
    from veri_tui.launch.ssh.multinode_checks import node_label

    labels = [node_label(k, h) for k, h in enumerate(hosts)]
    _, refused = node_rows(conns, pfs, plan, output, labels)
    if refused:
        raise VeriError(refused)
