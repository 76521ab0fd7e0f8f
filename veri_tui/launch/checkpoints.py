"""Which checkpoint a multi-node job resumes from: the newest step committed and verified on
every node, asked of each node's host (or read in one place on shared storage).

Each node's ranks save their own rank-local DCP files into their own node's folder
(veri_tui/trainer/checkpoint.py), so a step is usable only when every node committed its part and
that part verifies (veri_tui/jobfolder/contract/ckptindex.py: `COMPLETE`, the manifest, each rank's
`__<rank>.metadata`, every file's size and sha256). The check runs on the host with the
job's own jobfolder package (`python -m veri_tui.jobfolder checkpoints`): first every node lists its
committed steps (cheap), then the newest step they all have is verified on every node, and
the next one when a node's part fails, so only the candidates are hashed. When the node
folders share one filesystem (nodes.shared_storage), node 0 checks every node's folder
itself, and the log says so.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from typing import Any

from veri_tui.errors import VeriError
from veri_tui.launch.host import Host, jobfolder_argv
from veri_tui.launch.hostpool import in_parallel


def common_steps(committed: Sequence[Sequence[int]]) -> tuple[list[int], list[str]]:
    """The steps committed on every node, newest first, and a line for each newer step
    some node lacks (`step-30: committed on node 0 only`)."""
    sets = [set(c) for c in committed]
    common = sorted(set.intersection(*sets), reverse=True) if sets else []
    newest = common[0] if common else -1
    lines = []
    for step in sorted(set().union(*sets), reverse=True):
        if step > newest and step not in common:
            have = [k for k, s in enumerate(sets) if step in s]
            who = ", ".join(f"node {k}" for k in have)
            lines.append(f"step-{step}: committed on {who} only")
    return common, lines


class NodeCheck:
    """Runs `python -m veri_tui.jobfolder checkpoints list|verify` for every node's folder: on each
    node's host, or all on node 0's (shared)."""

    def __init__(self, hosts: Sequence[Host], dirs: Sequence[str], shared: bool) -> None:
        self.dirs = list(dirs)
        if shared:  # node k's folder as node 0 sees it: the same parent, k's folder name
            seen = [posixpath.join(posixpath.dirname(dirs[0]), posixpath.basename(d)) for d in dirs]
            self.groups = [(hosts[0], dirs[0], seen)]
        else:
            self.groups = [(h, d, [d]) for h, d in zip(hosts, dirs, strict=True)]

    def run(self, mode: str, step: int = 0) -> list[Any]:
        """Each node's answer, node order."""

        def one(group: tuple[Host, str, list[str]]) -> dict[str, Any]:
            host, own, folders = group
            what = [mode, str(step)] if mode == "verify" else [mode]
            argv = jobfolder_argv(host, own, "checkpoints", *what, *folders)
            res = host.machine.run(argv, timeout=3600)  # hashing a large step
            if res.exit_status != 0:
                why = res.error_line()
                raise VeriError(f"checking checkpoints on {host.machine.name} failed: {why}", "job")
            answer: dict[str, Any] = json.loads(res.stdout)
            return answer

        answers: dict[str, Any] = {}
        for got in in_parallel(one, self.groups):
            if isinstance(got, Exception):
                raise got
            answers.update(got)
        return [answers[f] for _, _, folders in self.groups for f in folders]


def choose_step(check: NodeCheck) -> tuple[int | None, list[str]]:
    """(the newest step committed and verified on every node or None, the log lines naming
    every newer step that was skipped and why)."""
    common, lines = common_steps(check.run("list"))
    # Every newer step goes on every node: the new attempt saves it again.
    skipped = [f"resume: skipped {line}; removed" for line in lines]
    for step in common:
        found = check.run("verify", step)
        bad = [f"node {k}: {why}" for k, why in enumerate(found) if why]
        if not bad:
            return step, skipped
        skipped.append(f"resume: skipped step-{step}: {'; '.join(bad)}; removed")
    return None, skipped
