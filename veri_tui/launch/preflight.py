"""The one preflight: what `launch` would check, for N hosts, starting nothing.

The rows (`facts.Row`: check, ok, detail) the app's launch screen shows and the facade's
`preflight` returns. Each step is the launch sequence's own (launching.py), its refusals
collected as rows with ok False instead of raised, so a check passes here exactly when
`launch` would pass it:

- the plan, first (`plan: dp=...`), then where each node's ranks run against it (`device`:
  CUDA GPUs, or a `warning: ` of CPU processes instead of the planned GPUs; device.py);
- what each host reported (`host` rows; several hosts: `node <k> (<host>)` rows, the
  layout `nodes: 2 x 1 GPU (a, b)`, the rendezvous probe, the nodes' bandwidth and GPU
  health probe (docs/probe.md), whether the nodes share storage);
- the model's tokenizer and the job's rows encoded with it where the job will run, and the
  global batch against them (datacheck.py: once nothing else is refused);
- where the job's files are (this machine: the model, dataset and output folder after a dry
  run of its paths; a host: the output dir there);
- each node's host memory and disk against the plan (host order: this machine shows disk
  first), and what this machine has for running it (torch);
- every refusal, once.

A host that cannot be reached raises VeriError (UnknownHostKeyError for an unknown key, so
the app can ask to trust it).
"""

from __future__ import annotations

import posixpath
import tempfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.backends import Destination
from veri_tui.launch.datacheck import check_data
from veri_tui.launch.host import Host, HostFacts, Row
from veri_tui.launch.job_datasets import data_bytes
from veri_tui.launch.launching import device_rows, own_checks, probe_all
from veri_tui.launch.nodes import disk_of, node_label, probe_rendezvous, storage_row
from veri_tui.launch.probe.fleet import ProbeChoice, fleet_probe, needs_probe
from veri_tui.launch.probe.report import with_network
from veri_tui.plan.gpus import gpus_text

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

T = TypeVar("T")


def _collect(problems: list[Refusal], call: Callable[[], T]) -> T | None:
    try:
        return call()
    except VeriError as exc:
        problems.extend(exc.errors)
        return None


def _node_rows(hosts: Sequence[Host], facts: list[HostFacts], job: JobConfig,
               problems: list[Refusal]) -> tuple[list[Row], JobConfig]:  # fmt: skip
    """Several hosts: each node's facts, the layout, the rendezvous, the launch's probe of
    the nodes (the job gets its measured network), the storage."""
    names = [h.machine.name for h in hosts]
    rows: list[Row] = []
    for k, pf in enumerate(facts):
        label = node_label(k, names[k])
        rows += [(label, True, line.removeprefix(f"host {pf.host}: ")) for line in pf.summary()]
    per_node = job.gpu_count // len(hosts)
    if per_node:  # else the gpu_count that does not split is refused (check_job)
        rows.append(("nodes", True, f"{len(hosts)} x {gpus_text(per_node)} ({', '.join(names)})"))
    addr, port, _, found = probe_rendezvous(hosts, job.rdzv_port, job.rdzv_endpoint)
    problems += found
    if not found:
        rows.append(("rendezvous", True, f"{addr}:{port} on node 0, reached from "
                                        f"{', '.join(names[1:])}"))  # fmt: skip
        report = _collect(problems, lambda: fleet_probe(hosts, facts, job, ProbeChoice()))
        if report is not None:  # a slow or sick node is one of the problems
            rows.append(("probe", True, report.network_line() or "measured"))
            job = with_network(job, report.internode_gbps, report.note())
    rows.append(storage_row(hosts, [pf.jobs_dir for pf in facts]))
    return rows, job


def preflight(job: JobConfig, plan_record: PlanRecord | None, dest: Destination[object],
              trust: str | None) -> list[Row]:  # fmt: skip
    """The preflight rows of launching ``job`` on these hosts (None: this machine);
    ``plan_record``: the plan made here, used for this machine only."""
    names = dest.names
    many = len(names) > 1
    problems: list[Refusal] = []
    hosts = dest.open(trust)
    try:
        head = hosts[0]
        checked = job.copy_with(update={"hosts": names}) if many else job
        own = _collect(problems, lambda: own_checks(checked, hosts)) is None and problems
        size = _collect(problems, lambda: 0 if head.machine.local else data_bytes(job))
        facts, job, found = probe_all(dest.backend, hosts, job, size or 0)
        problems += found
        if many:
            rows, job = _node_rows(hosts, facts, job, problems)
        else:
            rows = [("host", True, line) for line in facts[0].summary()]
            if not found and needs_probe(
                hosts, facts, job, dest.backend
            ):  # 2 GPUs or more: their health
                report = _collect(problems, lambda: fleet_probe(hosts, facts, job, ProbeChoice()))
                rows += [("probe", True, report.lines()[-1])] if report is not None else []
        out_job = _collect(problems, lambda: head.output_for(job, facts[0]))
        job = out_job if out_job is not None else job
        known = all(pf.model_known for pf in facts) and not (many and own)
        plan = (
            _collect(problems, lambda: head.plan(job, facts[0], plan_record)[1]) if known else None
        )
        paths, data_rows = None, list[Row]()
        if plan is not None and not problems:  # the rows, with the model's tokenizer there
            data_rows, refused = check_data(head, facts[0], job, plan)
            problems += refused
        if plan is not None:
            rows[:0] = [("plan", True, plan.plan_line.removeprefix("plan: ")),
                        *device_rows(hosts, facts, plan)]  # fmt: skip
            with tempfile.TemporaryDirectory() as tmp:  # a dry run: the folder is thrown away
                where = posixpath.join(tmp, "job")
                paths = _collect(problems, lambda: head.job_paths(job, plan, where, facts[0]))
        if out_job is not None:
            rows += head.path_rows(
                job, paths, node_label(0, head.machine.name) if many else head.where
            )
        rows += data_rows
        if plan is not None:
            for k, (host, pf) in enumerate(zip(hosts, facts, strict=True)):
                output = (paths[2] if paths else job.output) if k == 0 and job.output else None
                label = node_label(k, host.machine.name) if many else ""
                more, refused = host.capacity(pf, plan, disk_of(plan, len(hosts), k), output, label)
                rows += more
                problems += refused
        rows += head.tail_rows()
    finally:
        for host in hosts:
            host.machine.close()
    # A refusal found both by the job's own checks and by planning is shown once.
    return rows + [(e.key, False, e.message) for e in dict.fromkeys(problems)]
