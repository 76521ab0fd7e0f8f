"""What the probe's bandwidth record (veri_tui/trainer/probe.py) says: the table, the figure a plan
uses, and which node is slow.

- The figure: the across-nodes all_reduce bus bandwidth at the largest size (local rank 0 of
  every node; with one rank a node, every rank), in Gb/s per node: what the throughput model's
  `internode_bandwidth_gbps` means (veri_tui/plan/throughput.py).
- A slow node, two ways. The others wait for it: in every collective, the ranks that arrive
  first wait for the last; a node whose ranks spend less than half the others' time inside
  the collectives (and at least MIN_LAG_S less) is the one they wait for (on one node, the
  same rule names a rank: a slow GPU). Its links are slow: with three nodes or more, a node
  whose pairwise bandwidths are all below half the median of the pairs without it.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

SLOW_SHARE = 0.5  # of the others' time inside a collective spent waiting for one node
MIN_LAG_S = 0.002  # and at least this long per collective: below it, noise
SLOW_PAIR = 0.5  # of the median busbw of the pairs without that node


class Slow(NamedTuple):
    """A node (or, on one machine, a rank) the probe found slow, and why."""

    node: int
    rank: int | None
    why: str


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _scope_name(res: dict[str, Any], labels: list[str]) -> str:
    nodes = res["nodes"]
    names = ", ".join(labels[k] for k in nodes)
    if res["scope"] == "all":
        return f"all {len(res['ranks'])} ranks"
    if res["scope"] == "node":
        return f"within {names}"
    if res["scope"] == "pair":
        return f"pair {names}"
    return f"across nodes ({names})"


def table(record: dict[str, Any], labels: list[str]) -> list[str]:
    """One line per scope and kind: busbw in GB/s at each size."""
    rows: dict[tuple[str, str], list[str]] = {}
    for res in record["results"]:
        cells = rows.setdefault((_scope_name(res, labels), res["kind"]), [])
        cells.append(f"{_size(res['bytes'])} {res['busbw_gbs']:.3f}")
    width = max((len(scope) for scope, _ in rows), default=0)
    head = (f"bus bandwidth, GB/s ({record['backend']} on {record['device']}, "
            f"{record['nodes']} node(s) x {record['ranks_per_node']} rank(s), "
            f"{record['iters']} timed per size):")  # fmt: skip
    return [head] + [f"  {scope:<{width}}  {kind:<14} " + "  ".join(cells)
                     for (scope, kind), cells in rows.items()]  # fmt: skip


def across(record: dict[str, Any]) -> dict[str, Any] | None:
    """The across-nodes all_reduce result at the largest size (None on one node)."""
    if record["nodes"] < 2:
        return None
    scope = "across" if record["ranks_per_node"] > 1 else "all"
    found = [r for r in record["results"] if r["scope"] == scope and r["kind"] == "all_reduce"]
    return max(found, key=lambda r: r["bytes"]) if found else None


def internode_gbps(record: dict[str, Any]) -> float | None:
    """Gb/s per node between the nodes, as the plan's network figure (None on one node)."""
    res = across(record)
    return None if res is None else res["busbw_gbs"] * 8


def intranode_busbw(record: dict[str, Any]) -> float | None:
    """GB/s of the all_reduce among one node's ranks at the largest size (the slowest node's);
    None with one rank a node."""
    if record["ranks_per_node"] < 2:
        return None
    scope = "node" if record["nodes"] > 1 else "all"
    found = [r for r in record["results"] if r["scope"] == scope and r["kind"] == "all_reduce"]
    top = max((r["bytes"] for r in found), default=0)
    return min((r["busbw_gbs"] for r in found if r["bytes"] == top), default=None)


def _unit(record: dict[str, Any], rank: int) -> int:
    """What is named: the node on several nodes, else the rank (a GPU of this machine)."""
    return rank // record["ranks_per_node"] if record["nodes"] > 1 else rank


def waited_for(record: dict[str, Any]) -> list[Slow]:
    """The nodes (ranks on one node) the others waited for in the collectives."""
    lags: dict[int, list[tuple[float, float]]] = {}
    for res in record["results"]:
        units = [_unit(record, r) for r in res["ranks"]]
        if len(set(units)) < 2:
            continue
        for u in set(units):
            own = [t for t, v in zip(res["inside_s"], units, strict=True) if v == u]
            rest = [t for t, v in zip(res["inside_s"], units, strict=True) if v != u]
            others = statistics.fmean(rest)
            lag = others - statistics.fmean(own)
            lags.setdefault(u, []).append((lag, lag / others if others > 0 else 0.0))
    out = []
    for u, seen in sorted(lags.items()):
        lag = statistics.median(s[0] for s in seen)
        share = statistics.median(s[1] for s in seen)
        if share >= SLOW_SHARE and lag >= MIN_LAG_S:
            many = record["nodes"] > 1
            out.append(Slow(u if many else 0, None if many else u,
                            f"the others waited {lag * 1e3:.0f} ms for it in each collective "
                            f"({share:.0%} of their time in it)"))  # fmt: skip
    return out


def slow_links(record: dict[str, Any]) -> list[Slow]:
    """Nodes whose every pairwise all_reduce is below half the median of the other pairs."""
    pairs = [r for r in record["results"] if r["scope"] == "pair"]
    out = []
    for k in range(record["nodes"]):
        mine = [r["busbw_gbs"] for r in pairs if k in r["nodes"]]
        rest = [r["busbw_gbs"] for r in pairs if k not in r["nodes"]]
        if mine and rest and max(mine) < SLOW_PAIR * statistics.median(rest):
            out.append(Slow(k, None, f"its links measure {max(mine):.3f} GB/s at best, the "
                            f"other pairs {statistics.median(rest):.3f} GB/s"))  # fmt: skip
    return out


def slow_nodes(record: dict[str, Any]) -> list[Slow]:
    """Every slow node (or rank) found, each once with all its reasons."""
    found: dict[tuple[int, int | None], list[str]] = {}
    for s in waited_for(record) + slow_links(record):
        found.setdefault((s.node, s.rank), []).append(s.why)
    return [Slow(node, rank, "; ".join(why)) for (node, rank), why in found.items()]
