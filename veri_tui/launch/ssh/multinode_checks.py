"""The preflight rows of a multi-node job (the launch facade's `preflight` with several
hosts, shown by the app's launch screen): every node's facts labelled by node, the layout,
the rendezvous probe and the plan, each problem a row with ok False.

The checks are the multi-node launch's own (multinode.py: `preflight_nodes`, `agreement`,
`probe_rendezvous`), so a row passes here exactly when `launch --host a --host b` would. The
`storage` row says whether the nodes' jobs folders are one shared filesystem (a marker file
written from node 0, looked for from the others; multinode_ckpt.shared_storage): where a
resume reads the nodes' checkpoints.
"""

from __future__ import annotations

import posixpath
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.spec import check_job, local_dataset
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.launch import check_output, plan_for_host
from veri_tui.launch.ssh.multinode import preflight_nodes, probe_rendezvous
from veri_tui.launch.ssh.multinode_ckpt import shared_storage
from veri_tui.launch.ssh.node_checks import node_rows

Row = tuple[str, bool, str]


def node_label(k: int, host: str) -> str:
    """`node 1 (b)`: how rows and reports name a node."""
    return f"node {k} ({host})"


def multinode_rows(job: Any, hosts: list[str], trust_host: str | None = None) -> list[Row]:
    """(check, ok, detail) rows for launching `job` on `hosts`, one node each, node 0 first.

    The job's own refusals (with the hosts set, so a gpu_count that does not split over the
    nodes is one), each node's facts (`node 0 (a): python ..., torch ...`), the layout
    (`nodes: 2 x 1 GPUs (a, b)`), whether the nodes agree, whether every node reaches node
    0's rendezvous port, the output dir on node 0, the plan, and each node's host memory and
    disk against what it must hold (node_checks.py). A host that cannot be reached raises
    VeriError (UnknownHostKeyError for an unknown key), as one host does.
    """
    problems: list[Refusal] = []
    try:
        check_job(job.model_copy(update={"hosts": list(hosts)}), output_here=False)
        dataset_bytes = local_dataset(job).stat().st_size
    except VeriError as exc:
        problems += exc.errors
        dataset_bytes = 0
    own_refusals = bool(problems)  # planning would refuse the same job again, less clearly
    conns, pfs, job, node_problems = preflight_nodes(job, hosts, trust_host, dataset_bytes)
    problems += node_problems
    rows: list[Row] = []
    try:
        for k, pf in enumerate(pfs):
            label = node_label(k, hosts[k])
            rows += [(label, True, line.removeprefix(f"host {pf.host}: ")) for line in pf.summary()]
        per_node = job.gpu_count // len(hosts)
        if per_node:  # else the gpu_count that does not split is refused (check_job)
            rows.append(("nodes", True, f"{len(hosts)} x {per_node} GPUs ({', '.join(hosts)})"))
        addr, port, _, rdzv_problems = probe_rendezvous(conns, job)
        problems += rdzv_problems
        if not rdzv_problems:
            others = ", ".join(hosts[1:])
            rows.append(("rendezvous", True, f"{addr}:{port} on node 0, reached from {others}"))
        rows.append(storage_row(conns, [posixpath.join(pf.veri_home, "jobs") for pf in pfs]))
        if job.output:
            try:
                job = check_output(conns[0], job, pfs[0])
                rows.append(("output", True, f"{job.output} on node 0 ({hosts[0]})"))
            except VeriError as exc:
                problems += exc.errors
        known = job.model is None or all(pf.model_info is not None for pf in pfs)
        if known and not own_refusals:  # the model's counts are known on every node
            try:
                _, plan = plan_for_host(job, pfs[0])
                rows.insert(0, ("plan", True, plan.plan_line.removeprefix("plan: ")))
                labels = [node_label(k, h) for k, h in enumerate(hosts)]
                more, refused = node_rows(conns, pfs, plan, job.output, labels)
                rows += more
                problems += refused
            except VeriError as exc:
                problems += exc.errors
    finally:
        for conn in conns:
            conn.close()
    return rows + [(e.key, False, e.message) for e in dict.fromkeys(problems)]


def storage_row(conns: list[Connection], jobs_dirs: list[str]) -> Row:
    """Whether the nodes' jobs folders are one filesystem (made when missing, as launch
    makes them); informative: either way the job runs."""
    try:
        for conn, folder in zip(conns, jobs_dirs, strict=True):
            files.makedirs(conn.sftp(), folder)
        shared = shared_storage(conns, jobs_dirs)
    except OSError as exc:
        return ("storage", True, f"not checked ({exc})")
    if shared:
        return ("storage", True, "one shared filesystem: node 0 sees every node's job folder "
                "(a resume checks the checkpoints there)")  # fmt: skip
    return ("storage", True, "each node's own disk (a resume asks every node for its checkpoints)")
