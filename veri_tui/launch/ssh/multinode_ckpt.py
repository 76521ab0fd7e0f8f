"""Which checkpoint a multi-node job resumes from: the newest step committed and verified on
every node, asked of each node over SSH (or read in one place on shared storage).

Each node's ranks save their own rank-local DCP files into their own node's folder
(trainer/checkpoint.py), so a step is usable only when every node committed its part and
that part verifies (jobfolder/ckptindex.py: `COMPLETE`, the manifest, each rank's
`__<rank>.metadata`, every file's size and sha256). The check runs on the host with the
job's uploaded jobfolder package (`python -m jobfolder checkpoints`): first every node lists
its committed steps (cheap), then the newest step they all have is verified on every node,
and the next one when a node's part fails, so only the candidates are hashed.

When the node folders' parent is one filesystem on every node (NFS and the like), a marker
file written from node 0 is seen by the others (`shared_storage`): then node 0 checks every
node's folder itself, and the log says so.
"""

from __future__ import annotations

import json
import posixpath
import secrets
from collections.abc import Sequence
from typing import Any

from veri_tui.errors import VeriError
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection, command_line
from veri_tui.launch.ssh.multinode import in_parallel


def shared_storage(conns: Sequence[Connection], parents: Sequence[str]) -> bool:
    """True when every node sees a marker file node 0 writes in its folders' parent: the
    node folders are then on one filesystem. The marker is removed again."""
    if len(conns) < 2:
        return False
    name = f".veri-shared-{secrets.token_hex(8)}"
    mark = posixpath.join(parents[0], name)
    files.write_atomic(conns[0].sftp(), mark, b"veri-tui shared storage probe\n")
    try:
        seen = in_parallel(
            lambda k: files.exists(conns[k].sftp(), posixpath.join(parents[k], name)),
            list(range(1, len(conns))),
        )
        return all(s is True for s in seen)
    finally:
        try:
            conns[0].sftp().remove(mark)
        except OSError:
            pass  # left behind: a hidden empty file, harmless


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
    """Runs `python -m jobfolder checkpoints list|verify` (the job's uploaded package) for
    every node's folder: on each node, or all on node 0 (shared)."""

    def __init__(self, conns: Sequence[Connection], dirs: Sequence[str], python: str,
                 shared: bool) -> None:  # fmt: skip
        self.dirs = list(dirs)
        if shared:  # node k's folder as node 0 sees it: the same parent, k's folder name
            seen = [posixpath.join(posixpath.dirname(dirs[0]), posixpath.basename(d)) for d in dirs]
            self.groups = [(conns[0], dirs[0], seen)]
        else:
            self.groups = [(c, d, [d]) for c, d in zip(conns, dirs, strict=True)]
        self.python = python

    def run(self, mode: str, step: int = 0) -> list[Any]:
        """Each node's answer, node order."""

        def one(group: tuple[Connection, str, list[str]]) -> dict[str, Any]:
            conn, own, folders = group
            what = [mode, str(step)] if mode == "verify" else [mode]
            argv = ["env", f"PYTHONPATH={posixpath.join(own, 'pkg')}", self.python, "-m",
                    "jobfolder", "checkpoints", *what, *folders]  # fmt: skip
            res = conn.run_line(command_line(argv), timeout=3600)  # hashing a large step
            if res.exit_status != 0:
                why = res.error_line()
                raise VeriError(f"checking checkpoints on {conn.spec.alias} failed: {why}", "job")
            return json.loads(res.stdout)

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
