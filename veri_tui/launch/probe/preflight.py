"""The probe as a step of a multi-node launch (veri_tui/launch/launching.py).

After the hosts agree and node 0's rendezvous is reachable, the nodes are probed: a probe of
the same host set cached within REUSE_S (`veri-tui probe` just before) is used as it is,
else they are measured now, with the job's ranks per node, and the result cached. A slow or
sick node refuses the launch by name (report.py), unless the user goes on at their own risk
(`--allow-slow-nodes`); `--no-probe`, or VERI_PROBE=0 in the environment, skips the step
(the plan then keeps the `network` assumption).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from veri_tui.errors import VeriError
from veri_tui.launch.host import Host, HostFacts
from veri_tui.launch.probe.report import ProbeReport, cached, from_dict, hosts_key, save

#: A cached probe this young (seconds) stands for a launch's own.
REUSE_S = 3600.0


@dataclass(frozen=True)
class ProbeChoice:
    """Whether a launch probes its nodes, and whether a slow or sick node stops it."""

    run: bool = True
    allow_slow: bool = False


def fleet_probe(hosts: Sequence[Host], facts: list[HostFacts], job: Any, choice: ProbeChoice
                ) -> ProbeReport | None:  # fmt: skip
    """The launch's probe of ``hosts`` (None when skipped); VeriError naming each slow or
    sick node, unless ``choice.allow_slow``."""
    if not choice.run or os.environ.get("VERI_PROBE") == "0":
        return None
    from veri_tui.launch.probe.fleet import measure

    key = hosts_key([h.name for h in hosts])
    data = cached(key, REUSE_S)
    if data is not None:
        report = from_dict(data)
    else:
        per_node = max(1, int(job.gpu_count) // len(hosts))
        report = measure(hosts, facts, ranks_per_node=per_node, key=key)
        save(report)
    refused = report.refusals()
    if refused and not choice.allow_slow:
        raise VeriError(refused)
    return report
