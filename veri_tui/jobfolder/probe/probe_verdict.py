"""The fleet probe's verdict on what the nodes measured: the printed lines and the refusals.

Shared by `veri-tui probe` and a launch's probe (veri_tui/launch/probe/report.py) and by the
Slurm batch job's probe of its own nodes (veri_tui/jobfolder/probe/slurmprobe.py), which runs on the
allocation's first node where nothing of veri_tui is imported. The inputs are what the nodes
printed: the bandwidth record of `veri_tui.trainer.probe` (rank 0's `VERI_PROBE {json}` line) and
each node's `VERI_HEALTH {json}` line of `veri_tui.trainer.gpuhealth`. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import veri_home
from veri_tui.jobfolder.probe import probe_bandwidth as bandwidth
from veri_tui.jobfolder.probe import probe_health as health

HEALTH_MARK = "VERI_HEALTH "
PROBE_MARK = "VERI_PROBE "
#: The way out of a refusal; ``how`` names how the node is left out.
EXCLUDE_HINT = "leave it out ({how}) or pass --allow-slow-nodes to go on at your own risk"

#: One srun task a node (`bash -c TASK veri-probe PYTHON PORT RANKS [--sizes ...]`): name
#: its node, read its GPUs, then become its node's torchrun (torch's static rendezvous on the
#: allocation's first host) running `veri_tui.trainer.probe`.
SRUN_TASK = r"""
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "VERI_NODE $SLURM_NODEID ${SLURMD_NODENAME:-$(hostname)}"
"$1" -m veri_tui.trainer.gpuhealth
py=$1 port=$2 ranks=$3
shift 3
exec "$py" -m torch.distributed.run --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" \
  --master-addr "$first" --master-port "$port" --nproc-per-node "$ranks" --max-restarts 0 \
  -m veri_tui.trainer.probe "$@"
"""


def marked(text: str, mark: str) -> list[dict[str, Any]]:
    """Every `MARK {json}` line of a command's output."""
    out = []
    for line in text.splitlines():
        if line.startswith(mark):
            try:
                out.append(json.loads(line[len(mark) :]))
            except ValueError:
                continue
    return out


def srun_names(text: str) -> dict[str, str]:
    """{node id: host name} from the SRUN_TASK's `VERI_NODE K NAME` lines."""
    names = {}
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["VERI_NODE"] and len(words) >= 3:
            names[words[1]] = words[2]
    return names


def node_name(labels: list[str], record: dict[str, Any], node: int, rank: int | None = None
              ) -> str:  # fmt: skip
    """`node 1 (n1)`; on one machine a rank: `rank 1 (local rank 1) on n0`."""
    if rank is not None and record["nodes"] == 1:
        return f"rank {rank} (local rank {rank}) on {labels[0]}"
    return f"node {node} ({labels[node]})"


def sick(facts: list[dict[str, Any]]) -> list[tuple[int, list[str]]]:
    """(node, problems) of every node whose GPUs are sick."""
    out = []
    for k, node in enumerate(facts):
        bad, _notes = health.node_findings(node)
        if bad:
            out.append((k, bad))
    return out


def refusals(labels: list[str], record: dict[str, Any], facts: list[dict[str, Any]],
             exclude: str) -> list[str]:  # fmt: skip
    """Each sick or slow node by name with the way out (``exclude``: how a node is left
    out, `{name}` its label); one line per fact the nodes disagree on."""

    def hint(k: int) -> str:
        return EXCLUDE_HINT.format(how=exclude.format(name=labels[k]))

    out = [f"{node_name(labels, record, k)} is sick: {'; '.join(bad)}; {hint(k)}"
           for k, bad in sick(facts)]  # fmt: skip
    for s in bandwidth.slow_nodes(record):
        out.append(f"{node_name(labels, record, s.node, s.rank)} is slow: {s.why}; {hint(s.node)}")
    return out + health.agreement(labels, facts)


def network_line(record: dict[str, Any]) -> str | None:
    """`network: 1.13 Gb/s per node across the nodes (...)`; None on one node."""
    gbps = bandwidth.internode_gbps(record)
    if gbps is None:
        return None
    res = bandwidth.across(record) or {}
    return (f"network: {gbps:.2f} Gb/s per node across the nodes (all_reduce busbw "
            f"{res.get('busbw_gbs', 0):.3f} GB/s at {res.get('bytes', 0) >> 20} MiB): "
            "plans on these nodes use it")  # fmt: skip


def lines(labels: list[str], record: dict[str, Any], facts: list[dict[str, Any]]) -> list[str]:
    """What `veri-tui probe` prints: the bandwidth table, the figures, the health."""
    out = bandwidth.table(record, labels)
    network = network_line(record)
    out += [network] if network else []
    intra = bandwidth.intranode_busbw(record)
    if intra is not None:
        out.append(f"within a node: all_reduce busbw {intra:.3f} GB/s")
    return out + health.summary(labels, facts)


def as_dict(key: str, labels: list[str], record: dict[str, Any], facts: list[dict[str, Any]],
            measured_at: str) -> dict[str, Any]:  # fmt: skip
    """The whole report, as the probe cache keeps it (veri_tui/launch/probe/report.py)."""
    return {
        "key": key, "labels": labels, "measured_at": measured_at,
        "internode_gbps": bandwidth.internode_gbps(record),
        "intranode_busbw_gbs": bandwidth.intranode_busbw(record),
        "slow": [node_name(labels, record, s.node, s.rank) + ": " + s.why
                 for s in bandwidth.slow_nodes(record)],
        "sick": [f"{node_name(labels, record, k)}: {'; '.join(b)}" for k, b in sick(facts)],
        "bandwidth": record, "health": facts,
    }  # fmt: skip


def summary(full: dict[str, Any], printed: list[str]) -> dict[str, Any]:
    """What a job's record keeps of a probe (job.json `probe`): ``full`` is `as_dict`."""
    keep = ("key", "measured_at", "internode_gbps", "intranode_busbw_gbs", "slow", "sick")
    return {k: full[k] for k in keep} | {"lines": printed}


def cache_path(key: str) -> Path:
    """`$VERI_HOME/cache/probe/<digest>.json`: where plans look up the probe of ``key``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return veri_home() / "cache" / "probe" / f"{digest}.json"


def save_cached(full: dict[str, Any]) -> Path:
    """Write a report (`as_dict`) to its key's cache file, atomically."""
    path = cache_path(str(full["key"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, full)
    return path
