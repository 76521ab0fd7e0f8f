"""`veri-tui probe`: collective bus bandwidth and GPU health of this machine, SSH hosts or a
Slurm allocation (the nodes a backend's probe options name: veri_tui/launch/backends); the
measured network is cached for plans on the same hosts.

Prints the bandwidth table, the network figure, the health lines; exit 0, or 1 with one
`error: hosts: node K (name) is slow|sick: ...` line per node refused (a launch would refuse
it too), unless --allow-slow-nodes.
"""

from __future__ import annotations

import argparse
import json
import sys

from veri_tui.errors import VeriError


def _sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1024:
        raise VeriError(f"{text!r}: give buffer sizes in bytes, comma-separated, each at least "
                        "1024 (e.g. 1048576,16777216)", key="sizes")  # fmt: skip
    return sizes


def run(args: argparse.Namespace) -> int:
    """Probe, print, cache; exit status."""
    from veri_tui.launch import backends
    from veri_tui.launch.probe.report import save

    sizes = _sizes(args.sizes)
    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        raise VeriError("--ranks-per-node must be at least 1", key="ranks_per_node")
    report = backends.probe(vars(args), args.trust_host, args.ranks_per_node, sizes)
    path = save(report)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join(report.lines()))
        used = f" (plans on {report.key.split(':', 1)[1]} use it)" if report.internode_gbps else ""
        print(f"saved: {path}{used}")
    refused = report.refusals()
    for refusal in refused:
        print(f"error: {refusal.key}: {refusal.message}", file=sys.stderr)
    return 1 if refused and not args.allow_slow_nodes else 0
