"""A Slurm partition as a plan needs it: its nodes, their GPU type and count, cores and memory.

Read from the controller with `scontrol show partition -o` (every partition, one line each:
the default one when none is named) and `scontrol show node -o <nodes>` (each node's `Gres`,
e.g. `gpu:h100:2` or `gpu:h100:8(S:0-1)`, `CPUTot`, `RealMemory` in MiB). The gres type is
mapped to the planner's GPU catalog (`catalog_gpu`); a type it does not know is refused, not
guessed: the way out is `--gpu NAME`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.machine import Result
from veri_tui.launch.slurm.options import SlurmOptions

#: A command on the login node (its Slurm clients), as `Host.run` runs it.
Run = Callable[[Sequence[str]], Result]

# Gres type spellings (lower case, only letters and digits kept) -> the GPU catalog's name.
# Whatever is not matched here is unknown: a100 alone could be 40 or 80 GB.
_TYPES = (
    (r"h200(sxm\d?)?(141gb?)?", "H200-141GB"),
    (r"b200(sxm\d?)?(180gb?)?", "B200-180GB"),
    (r"h100(sxm\d?)?(80gb?)?", "H100-80GB"),
    (r"a100(sxm\d?|pcie)?80gb?", "A100-80GB"),
    (r"a100(sxm\d?|pcie)?40gb?", "A100-40GB"),
    (r"l4(24gb?)?", "L4-24GB"),
    (r"a10g(24gb?)?", "A10G-24GB"),
)
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?:(\d+)")


@dataclass(frozen=True)
class Partition:
    """What a partition offers one job's node (the smallest of its nodes)."""

    name: str
    nodes: tuple[str, ...]
    gpu_type: str | None  # the gres type (`h100`), None without one or without GPUs
    gpus_per_node: int  # 0: a CPU partition
    cpus_per_node: int
    memory_bytes: int  # RealMemory, the memory a job may be given on a node
    gres: str  # as the controller says it, for messages

    def summary(self) -> str:
        gpus = f"{self.gpus_per_node} x gres {self.gres}" if self.gpus_per_node else "no GPUs"
        return (
            f"partition {self.name}: {len(self.nodes)} node(s) ({', '.join(self.nodes)}), "
            f"{gpus}, {self.cpus_per_node} CPUs, {self.memory_bytes / 1e9:.1f} GB each"
        )


def fields(line: str) -> dict[str, str]:
    """`Key=Value Key=Value ...` of a `scontrol -o` line (values hold no spaces but may
    hold `=`, e.g. `TRES=cpu=2,mem=4000M`)."""
    out: dict[str, str] = {}
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq:
            out[key] = value
    return out


def catalog_gpu(gres_type: str) -> str | None:
    """The GPU catalog name of a gres type (`h100` -> `H100-80GB`); None when unknown."""
    key = re.sub(r"[^a-z0-9]", "", gres_type.lower())
    return next((name for pattern, name in _TYPES if re.fullmatch(pattern, key)), None)


def _scontrol(run: Run, where: str, *args: str) -> list[str]:
    res = run(["scontrol", "show", *args, "-o"])
    if res.exit_status != 0:
        raise VeriError(
            f"scontrol show {args[0]} on {where} failed: {res.error_line()}; "
            "is Slurm reachable from there (SLURM_CONF, munge)?",
            key="slurm",
        )
    return [ln for ln in res.text.splitlines() if ln.strip()]


def read_partition(run: Run, name: str | None, where: str) -> Partition:
    """The partition ``name`` (None: the cluster's default) as the controller reports it.
    VeriError `partition` for a name it does not have, naming the ones it has."""
    parts = [fields(line) for line in _scontrol(run, where, "partition")]
    names = [p.get("PartitionName", "?") for p in parts]
    if name is None:
        found = next((p for p in parts if p.get("Default") == "YES"), None)
        if found is None:
            raise VeriError(
                f"{where} has no default partition; pass --partition (one of {', '.join(names)})",
                key="partition",
            )
    else:
        found = next((p for p in parts if p.get("PartitionName") == name), None)
        if found is None:
            raise VeriError(
                f"{name}: no such partition on {where}; pass --partition with one "
                f"of {', '.join(names) or 'none'}",
                key="partition",
            )
    label = found["PartitionName"]
    if found.get("Nodes") in (None, "", "(null)"):
        raise VeriError(
            f"{label} on {where} has no nodes; choose another partition", key="partition"
        )
    nodes = [fields(line) for line in _scontrol(run, where, "node", found["Nodes"])]
    return _summarize(label, nodes, where)


def _summarize(name: str, nodes: list[dict[str, str]], where: str) -> Partition:
    """The partition's nodes as one job node: GPUs and their type must agree across nodes."""
    gpus = []
    for node in nodes:
        match = _GRES_GPU.search(node.get("Gres", ""))
        gpus.append((match.group(1), int(match.group(2))) if match else (None, 0))
    types = sorted({t or "" for t, n in gpus if n})
    if len(types) > 1:
        raise VeriError(
            Refusal(
                "partition",
                f"{name} on {where} mixes GPU types "
                f"({', '.join(types)}); choose a partition of one type",
            )
        )
    gres = sorted({n.get("Gres", "") for n in nodes})
    return Partition(
        name=name,
        nodes=tuple(n.get("NodeName", "?") for n in nodes),
        gpu_type=types[0] or None if types else None,
        gpus_per_node=min(n for _, n in gpus) if all(n for _, n in gpus) else 0,
        cpus_per_node=min(int(n.get("CPUTot") or 1) for n in nodes),
        memory_bytes=min(int(n.get("RealMemory") or 0) for n in nodes) * 2**20,
        gres=",".join(gres),
    )


def layout(job: Any, part: Partition, opts: SlurmOptions) -> tuple[int, str | None, list[Refusal]]:
    """(ranks per node, the GPU catalog name or None to keep the job's, the problems) of
    ``job`` on ``part``: every GPU of a node unless --gpus-per-node says fewer; a CPU
    partition runs --gpus-per-node (else gpu_count / nodes, else a node's cores) processes."""
    nodes, problems = opts.nodes, []
    if nodes > len(part.nodes):
        problems.append(
            Refusal(
                "slurm.nodes",
                f"{nodes} nodes asked for but partition "
                f"{part.name} has {len(part.nodes)}; lower --nodes",
            )
        )
    given = "gpu_count" in job.fields_given
    gpu = None
    if part.gpus_per_node:
        per = opts.gpus_per_node or part.gpus_per_node
        have, what = part.gpus_per_node, "GPUs"
        if "gpu" in job.fields_given:
            gpu = job.gpu  # the user's word for the hardware: the way out of an unknown type
        else:
            gpu = catalog_gpu(part.gpu_type or "")
            if gpu is None:
                from veri_tui.plan.gpus import GPU_CATALOG

                problems.append(
                    Refusal(
                        "gpu",
                        f"partition {part.name}: GPU type "
                        f"{part.gpu_type or '(none given)'!r} (gres {part.gres}) is not one "
                        f"veri-tui knows; pass --gpu NAME ({', '.join(GPU_CATALOG)} "
                        "or custom-<N>GB)",
                    )
                )
    else:
        per = opts.gpus_per_node or (job.gpu_count // nodes if given else 0) or part.cpus_per_node
        have, what = part.cpus_per_node, "CPUs"
    if per > have:
        problems.append(
            Refusal(
                "slurm.gpus_per_node",
                f"{per} per node asked for but the nodes "
                f"of {part.name} have {have} {what}; lower --gpus-per-node",
            )
        )
    if given and job.gpu_count != nodes * per:
        problems.append(
            Refusal(
                "gpu_count",
                f"{job.gpu_count} given, but the Slurm layout is "
                f"--nodes {nodes} x --gpus-per-node {per} = {nodes * per}; "
                "drop --gpu-count or change the layout",
            )
        )
    return per, gpu, problems


def on_partition(rec: Any, part: Partition | None) -> Any:
    """The plan record as planned for ``part``: its first header line names the partition
    read; on a CPU partition the cost has no GPU-hour price (the ranks are CPU processes,
    not the catalog GPU the memory budget is planned for), and a warning says so."""
    if rec is None or part is None:
        return rec
    header = [f"slurm: {part.summary()}", *rec.header_lines]
    if part.gpus_per_node:
        return rec._replace(header_lines=header)
    gpu = (rec.gpu or {}).get("name") or "the default GPU"
    ranks = int((rec.cost or {}).get("gpu_count") or rec.resolved_parallelism.get(
        "data_parallel_size") or 1)  # fmt: skip
    cost = {**rec.cost, "cpu_partition": part.name, "gpu_hours": None, "price": None,
            "price_per_gpu_hour": None, "gpu_count": ranks}  # fmt: skip
    warning = (
        f"partition {part.name} has no GPUs: the job runs {ranks} CPU rank(s) (gloo); "
        f"its memory is planned as for {gpu} and it has no GPU-hour price"
    )
    return rec._replace(header_lines=header, cost=cost, warnings=[*rec.warnings, warning])


def probe_key(partition: str) -> str:
    """The cache key of a partition's nodes' probe (probe/report.py: `slurm:<partition>`)."""
    return f"slurm:{partition}"
