"""The fleet probe's result: what it printed, what it refuses, and the cache a plan reads.

A `ProbeReport` holds the nodes' names, the bandwidth record (veri_tui/trainer/probe.py) and each
node's health facts (veri_tui/trainer/gpuhealth.py); it judges them (bandwidth.py, health.py) into
lines and refusals (veri_tui/jobfolder/probe/probe_verdict.py: the Slurm batch job judges with the
same). It is kept in `$VERI_HOME/cache/probe/<key>.json`, one file per host set (`hosts:n0,n1`, node
order) or Slurm partition (`slurm:debug`), where `veri-tui plan` and the launch look it up, and in a
launched job's job.json (`probe`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veri_tui.errors import Refusal
from veri_tui.jobfolder.probe import probe_bandwidth as bandwidth
from veri_tui.jobfolder.probe import probe_verdict as verdict

#: A cached probe older than this is not used by plans (seconds; a day).
MAX_AGE_S = 24 * 3600
EXCLUDE_HINT = verdict.EXCLUDE_HINT


def hosts_key(names: list[str]) -> str:
    """The cache key of a set of SSH hosts, in node order."""
    return "hosts:" + ",".join(names)


@dataclass
class ProbeReport:
    """One probe of N nodes."""

    key: str
    labels: list[str]
    record: dict[str, Any]
    health: list[dict[str, Any]]
    measured_at: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    )
    #: How a node is left out, `{name}` its label.
    exclude: str = "drop its --host"

    def node_name(self, node: int, rank: int | None = None) -> str:
        return verdict.node_name(self.labels, self.record, node, rank)

    def slow(self) -> list[bandwidth.Slow]:
        return bandwidth.slow_nodes(self.record)

    def sick(self) -> list[tuple[int, list[str]]]:
        """(node, problems) of every node whose GPUs are sick."""
        return verdict.sick(self.health)

    def refusals(self) -> list[Refusal]:
        """Each sick or slow node by name with the way out; nodes that disagree."""
        found = verdict.refusals(self.labels, self.record, self.health, self.exclude)
        return [Refusal("hosts", line) for line in found]

    @property
    def internode_gbps(self) -> float | None:
        return bandwidth.internode_gbps(self.record)

    def network_line(self) -> str | None:
        """`network: 1.13 Gb/s per node across the nodes (...)`; None on one node."""
        return verdict.network_line(self.record)

    def lines(self) -> list[str]:
        """What `veri-tui probe` prints: the bandwidth table, the figures, the health."""
        return verdict.lines(self.labels, self.record, self.health)

    def note(self) -> str:
        """How a plan names the figure's source: `by veri-tui probe, <when>`."""
        return f"by veri-tui probe, {self.measured_at}"

    def summary(self) -> dict[str, Any]:
        """What a job's record keeps of the probe that cleared it (job.json `probe`)."""
        return verdict.summary(self.to_dict(), self.lines())

    def to_dict(self) -> dict[str, Any]:
        return verdict.as_dict(self.key, self.labels, self.record, self.health, self.measured_at)


def save(report: ProbeReport) -> Path:
    """Write the report to its cache file (aside, then renamed into place)."""
    return verdict.save_cached(report.to_dict())


def cached(key: str, max_age_s: float = MAX_AGE_S) -> dict[str, Any] | None:
    """The cached probe of ``key`` when there is one younger than ``max_age_s``."""
    path = verdict.cache_path(key)
    try:
        data = json.loads(path.read_text())
        age = time.time() - path.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or age > max_age_s:
        return None
    return data


def from_dict(data: dict[str, Any]) -> ProbeReport:
    """A cached or recorded report, judged again by today's rules."""
    return ProbeReport(data["key"], list(data["labels"]), data["bandwidth"],
                       list(data["health"]), data["measured_at"])  # fmt: skip


def with_network(job: Any, gbps: float | None, note: str) -> Any:
    """``job`` planned with the measured network (Gb/s per node), unless the user set
    internode_bandwidth_gbps (theirs wins) or there is no figure (one node)."""
    hp = job.hyperparameters
    if not gbps or "internode_bandwidth_gbps" in hp.fields_given:
        return job
    measured = hp.copy_with(update={"internode_bandwidth_gbps": round(gbps, 3),
                                     "network_measured": note})  # fmt: skip
    return job.copy_with(update={"hyperparameters": measured})


def with_cached_network(job: Any, probed_as: tuple[str, int] | None = None) -> Any:
    """``job`` (a multi-node one) with the network its nodes' cached probe measured, when
    there is one: its hosts' (in node order), or the nodes node 0's host stands for
    (``probed_as``: `HostFacts.probed_as`, a Slurm partition's key and node count)."""
    if probed_as is not None:
        key, nodes = probed_as
    else:
        nodes, key = job.nodes, hosts_key(list(job.hosts or []))
    if nodes < 2:
        return job
    data = cached(key)
    if data is None:
        return job
    return with_network(
        job, data.get("internode_gbps"), f"by veri-tui probe, {data['measured_at']}"
    )
