"""A job's torchrun command line on one machine, as its supervisor starts it (supervise.py).

One node: ``--standalone`` (a free rendezvous port per job). Several (a multi-node SSH job,
each node's supervisor starting its own torchrun): torchrun's c10d rendezvous with node 0
hosting the store. The trainer runs as ``-m veri_tui.trainer --job <job.json>`` in every rank.
A Slurm job's command is srun's instead (srun_tasks.py). The ranks' environment: unbuffered output
(the log is followed live), one thread per CPU rank and CUDA's expandable segments, each unless
the user set it. Stdlib only, as the whole package.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

#: The caching allocator's setting for every rank (`alloc_conf`): without it fragmentation can
#: run a GPU out of memory with its allocated bytes well under the plan (reserved grows past
#: allocated). CPU runs ignore it.
EXPANDABLE = "expandable_segments:True"


def torchrun_command(spec: Mapping[str, Any], job_path: Path, log_dir: Path) -> list[str]:
    """torchrun for the job whose job.json is ``job_path`` and whose spec is ``spec``; its
    elastic error files under ``log_dir``."""
    return [
        sys.executable, "-m", "torch.distributed.run", *rendezvous(spec),
        "--nproc-per-node", str(int(spec.get("nproc_per_node") or spec["gpu_count"])),
        "--log-dir", str(log_dir),
        "-m", "veri_tui.trainer", "--job", str(job_path),
    ]  # fmt: skip


def rendezvous(spec: Mapping[str, Any]) -> list[str]:
    """``--standalone`` (a free local port per job) on one machine. On several, torchrun's
    c10d rendezvous with node 0 hosting the store (``is_host``). c10d numbers the nodes by
    sorting their ``--local-addr``: node 0 gives the address the others reach it at (its
    workers' MASTER_ADDR), node k that address + ``~node<k>``, which sorts after it in node
    order and is only ever logged (docs/ssh.md, "Multi-node jobs")."""
    nnodes = int(spec.get("nnodes") or 1)
    if nnodes <= 1:
        return ["--standalone"]
    node = int(spec.get("node_rank") or 0)
    addr = str(spec["rdzv_local_addr"])
    return [
        "--nnodes", str(nnodes), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", str(spec["rdzv_endpoint"]), "--rdzv-id", str(spec["rdzv_id"]),
        "--rdzv-conf", f"is_host={int(node == 0)}",
        "--local-addr", addr if node == 0 else f"{addr}~node{node:05d}",
    ]  # fmt: skip


def rank_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the supervisor's environment) as torchrun and its ranks get it."""
    env = dict(base, PYTHONUNBUFFERED="1")
    # One thread per CPU rank: N ranks each using every core would thrash; torchrun only
    # sets this (with a warning) when unset. On GPUs ranks do little CPU work either way.
    if "OMP_NUM_THREADS" not in env:
        # Marked as ours: a cpu_offload rank on a GPU takes its share of the cores instead
        # (veri_tui/trainer/parallelize.py offload_threads); a user's own setting is kept.
        env.update(OMP_NUM_THREADS="1", VERI_OMP_DEFAULT="1")
    alloc_conf(env)
    return env


def alloc_conf(env: MutableMapping[str, str]) -> None:
    """`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` unless the user set an allocator
    config (either name). It must be in the environment before the process imports torch:
    the allocator reads it once, at CUDA's first use, and an import that touches CUDA (a
    quantization library probing the device) would settle it early. Here it is in torchrun's
    environment, which the ranks inherit (the rank's entry sets it too, before its first
    import of torch, for ranks started some other way: veri_tui/trainer/__main__.py)."""
    if not env.get("PYTORCH_CUDA_ALLOC_CONF") and not env.get("PYTORCH_ALLOC_CONF"):
        env["PYTORCH_CUDA_ALLOC_CONF"] = EXPANDABLE
