"""The one launch sequence, for a job over N hosts (N = 1: this machine or one SSH host).

1. The job's own refusals (what `plan` refuses, the dataset, an output dir in use here).
2. Every host probed at once (its backend's `probe`: host.py `probe` on each): its Python,
   torch, GPUs, memory and disk, the model found there. Several hosts must agree, and node
   0's rendezvous must be reachable from the others (nodes.py). Every problem is refused
   together.
3. The output dir checked where it is (node 0), the plan made for node 0's host (this
   machine: the plan given, or made here; a host: from its GPUs and the model read there).
4. Each node's job.json (`spec.make_record` with that host's paths; a multi-node job's
   layout in each spec), then its host memory and disk against the plan, then the job's
   rows encoded with the model's tokenizer there and the global batch against them
   (datacheck.py): refused before anything is created anywhere. Where the ranks will run
   (device.py) is said once it all passed.
5. Each node's folder built aside (`.<name>.tmp`), filled (host.py `stage`) and renamed into
   place, hosts in parallel; then the job submitted by its backend (backends/: `submit`,
   every node's supervisor started; its typed handle, `JobRef`). A job over SSH hosts or
   with Slurm is entered in this machine's registry (registry.py) from that handle; a
   multi-node job gets its watcher (watcher.py). A folder that cannot be built starts
   nothing; a node that cannot be started cancels the others.

A Slurm job (slurm/host.py) is one host, its login node: its partition decides the layout
in step 2 (the host's `spec` keys), its supervisor is the batch job submitted in step 5;
`dry_run` stops before step 5 with what its backend (backends/) would submit: the batch
script.

`plan_on` is step 2-3 alone: the plan `launch` would make (`veri-tui plan --host`, a resume
re-planned on its host).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.layout import MADE_WITH, node_folder_name
from veri_tui.jobfolder.contract.procs import GRACE_S
from veri_tui.jobfolder.contract.record import JobRecord, JobSpec
from veri_tui.launch.backends import Destination, backend_of
from veri_tui.launch.backends.api import AnyBackend
from veri_tui.launch.backends.ref import SubmitError
from veri_tui.launch.datacheck import check_data
from veri_tui.launch.device import device_line, device_row
from veri_tui.launch.host import Host, HostFacts, Row, check_disk, check_memory
from veri_tui.launch.hostpool import all_or_raise, in_parallel
from veri_tui.launch.job_datasets import data_bytes
from veri_tui.launch.nodes import agreement, disk_of, node_label, probe_rendezvous
from veri_tui.launch.probe.fleet import ProbeChoice, fleet_probe, needs_probe
from veri_tui.launch.probe.report import with_cached_network, with_network
from veri_tui.launch.retries import wait_settled
from veri_tui.launch.spec import check_job, make_record, new_job_id
from veri_tui.launch.watching import start_watcher

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord


def own_checks(job: JobConfig, hosts: Sequence[Host]) -> None:
    """Raise VeriError with the job's own refusals; on another machine the output dir is a
    path there, checked there."""
    check_job(job, output_here=hosts[0].machine.local)


def probe_all(
    backend: AnyBackend, hosts: Sequence[Host], job: JobConfig, dataset_bytes: int
) -> tuple[list[HostFacts], JobConfig, list[Refusal]]:
    """Every host's facts (in parallel), the job with its layout set (a multi-node job's
    gpu_count is nodes x GPUs per node: given, or each node's detected GPUs), and every
    problem found (the hosts' own, and their disagreement)."""
    nodes = len(hosts)
    given = "gpu_count" in job.fields_given
    per_node = job.gpu_count // nodes if given else 1
    probe_job = job if nodes == 1 else job.copy_with(update={"gpu_count": per_node})
    facts = backend.probe(hosts, probe_job, dataset_bytes)
    problems = [p for pf in facts for p in pf.problems]
    if nodes > 1:
        problems += agreement(facts)
        if not given:
            per_node = len(facts[0].gpus) or 1  # detected: nodes x GPUs per node
        hosts_list = [h.machine.name for h in hosts]
        job = job.copy_with(update={"gpu_count": nodes * per_node, "hosts": hosts_list})
    return facts, job, problems


def device_rows(hosts: Sequence[Host], facts: list[HostFacts], plan: PlanRecord) -> list[Row]:
    """Where each node's ranks run against the plan's GPUs, named by node when there are
    several."""
    many = len(hosts) > 1
    return [device_row(pf, plan.job, host.where, node_label(k, host.machine.name) if many else "")
            for k, (host, pf) in enumerate(zip(hosts, facts, strict=True))]  # fmt: skip


def plan_on(job: JobConfig, dest: Destination[object], trust: str | None = None
            ) -> PlanRecord:  # fmt: skip
    """The plan `launch` would make for ``job`` on these hosts (None: this machine), every
    problem refused as launch refuses it; the job's own refusals before any host is asked."""
    from veri_tui.plan import validate

    names = dest.names
    errors = validate(job.copy_with(update={"hosts": names}) if len(names) > 1 else job)
    if errors:
        raise VeriError(errors)
    hosts = dest.open(trust)
    try:
        facts, job, problems = probe_all(dest.backend, hosts, job, 0)
        if problems:
            raise VeriError(list(dict.fromkeys(problems)))
        job, rec = hosts[0].plan(with_cached_network(job, facts[0].probed_as), facts[0])
        if job.dataset:  # the rows launch would train on, checked there
            refused = check_data(hosts[0], facts[0], job, rec)[1]
            if refused:
                raise VeriError(refused)
        return rec
    finally:
        for host in hosts:
            host.machine.close()


def replan(host: Host, record: JobRecord, gpu_count: int | None, sets: Sequence[str],
           nodes: int | None = None) -> JobSpec | None:  # fmt: skip
    """The spec of a one-host job's next attempt (replan.resume_spec): None to keep its own,
    else planned again on its open host, its problems refused. A Slurm job keeps its layout
    keys (the host's `spec`) and is laid out again from its record (options_for_resume),
    on ``nodes`` nodes when given."""
    from veri_tui.launch.replan import resume_spec

    keys: dict[str, object] = {}
    gpu_count, relaid = backend_of(host.kind).relayout(host, record, gpu_count, nodes)

    def plan_for(job: JobConfig) -> tuple[JobConfig, PlanRecord]:
        facts = host.probe(job, 0)
        facts.check()
        keys.update(facts.spec)
        return host.plan(job, facts)

    spec = resume_spec(record, gpu_count, sets, plan_for, force=relaid)
    return None if spec is None else cast(JobSpec, {**spec, **keys})


def host_record(
    host: Host, facts: HostFacts, job: JobConfig, plan: PlanRecord, job_id: str, job_dir: str
) -> JobRecord:
    """job.json of the job's folder ``job_dir`` on ``host``: the one layout
    (`spec.make_record`) with that host's paths, plus what the host reported."""
    model, dataset, output, name = host.job_paths(job, plan, job_dir, facts)
    record = make_record(job, plan, job_id, model_path=model, dataset=dataset,
                         output_dir=output, host=host.label, model_name=name)  # fmt: skip
    cast("dict[str, object]", record["spec"]).update(facts.spec)  # a Slurm job's layout
    if facts.summary():
        record["preflight"] = facts.summary()
    return record


def node_records(
    hosts: Sequence[Host], facts: list[HostFacts], job: JobConfig, plan: PlanRecord, job_id: str,
    rdzv: tuple[str, int, int] | None,
) -> list[tuple[str, JobRecord]]:  # fmt: skip
    """(folder, job.json) of every node: each host's paths; several nodes get the layout."""
    nodes, out = len(hosts), []
    for k, (host, pf) in enumerate(zip(hosts, facts, strict=True)):
        job_dir = posixpath.join(pf.jobs_dir, node_folder_name(job_id, k if nodes > 1 else None))
        record = host_record(host, pf, job, plan, job_id, job_dir)
        if rdzv is not None:
            addr, port, listen = rdzv
            record["spec"].update({
                "nnodes": nodes, "node_rank": k, "nproc_per_node": job.gpu_count // nodes,
                "rdzv_id": job_id, "rdzv_endpoint": f"{addr}:{listen if k == 0 else port}",
                "rdzv_local_addr": addr, "hosts": [h.machine.name for h in hosts],
            })  # fmt: skip
        out.append((job_dir, record))
    return out


def check_capacity(hosts: Sequence[Host], facts: list[HostFacts], plan: PlanRecord,
                   output: str | None
                   ) -> None:  # fmt: skip
    """Refuse (VeriError) a job some node's host cannot hold: one host's memory, then its
    disk (the first refusal); several nodes' refusals together, each naming its node."""
    if len(hosts) == 1:
        check_memory(facts[0], plan)
        check_disk(hosts[0], facts[0], plan.disk, output)
        return
    refused = []
    for k, (host, pf) in enumerate(zip(hosts, facts, strict=True)):
        disk = disk_of(plan, len(hosts), k)
        refused += host.capacity(
            pf, plan, disk, output if k == 0 else None, node_label(k, host.machine.name)
        )[1]
    if refused:
        raise VeriError(refused)


def create(host: Host, job: JobConfig, job_dir: str, record: JobRecord) -> None:
    """Build the node's folder aside, fill it and rename it into place (so no reader ever
    sees a half-made job); its backend's `submit` starts it."""
    parent, name = posixpath.split(job_dir)
    tmp = posixpath.join(parent, f".{name}.tmp")  # named after the folder: homes may be shared
    for sub in MADE_WITH:
        host.machine.makedirs(posixpath.join(tmp, sub))
    host.stage(job, tmp)
    host.machine.write_atomic(
        posixpath.join(tmp, "job.json"), (json.dumps(record, indent=2) + "\n").encode()
    )
    host.machine.rename(tmp, job_dir)


def launch(
    job: JobConfig, plan_record: PlanRecord | None, dest: Destination[object],
    trust: str | None, wait: bool,
    dry_run: bool = False, probe: ProbeChoice | None = None,
    canary: dict[str, object] | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> str:  # fmt: skip
    """Check, plan, create and start the job on these hosts (None: this machine); returns
    its id (``dry_run``: the batch script a Slurm host would submit, nothing created).
    ``say`` gets where the ranks will run, a line per node (device.py), once every check
    has passed and before anything is made.
    A multi-node job's nodes, or one machine's GPUs, are probed first (``probe``:
    fleet_probe, when needs_probe). Raises VeriError for
    every refusal, before anything is created."""
    from veri_tui.launch.jobindex import register

    hosts = dest.open(trust)
    backend, names = dest.backend, dest.names
    try:
        own_checks(job.copy_with(update={"hosts": names}) if len(names) > 1 else job, hosts)
        size = 0 if hosts[0].machine.local else data_bytes(job)
        facts, job, problems = probe_all(backend, hosts, job, size)
        rdzv = None
        if len(hosts) > 1:
            addr, port, listen, found = probe_rendezvous(hosts, job.rdzv_port, job.rdzv_endpoint)
            problems += found
            rdzv = (addr, port, listen)
        if problems:
            raise VeriError(list(dict.fromkeys(problems)))
        measured = (
            fleet_probe(hosts, facts, job, probe or ProbeChoice())
            if needs_probe(hosts, facts, job, backend)
            else None
        )
        if measured is not None:
            job = with_network(job, measured.internode_gbps, measured.note())
        else:  # skipped, one CPU host, or a Slurm partition (its cached probe)
            job = with_cached_network(job, facts[0].probed_as)
        job = hosts[0].output_for(job, facts[0])
        job, plan = hosts[0].plan(job, facts[0], plan_record)
        job_id = new_job_id()
        while hosts[0].machine.exists(posixpath.join(facts[0].jobs_dir, job_id)):
            job_id = new_job_id()  # same second, same random suffix: draw again
        nodes = node_records(hosts, facts, job, plan, job_id, rdzv)
        for _dir, rec in nodes:
            if measured is not None:
                cast("dict[str, object]", rec)["probe"] = measured.summary()
            if canary:
                rec["spec"]["canary"] = dict(canary)
        # A backend whose job probes its own nodes (Slurm's batch job: slurm/script.py)
        # records the probe step's mode in the spec.
        backend.record_probe_mode(nodes[0][1]["spec"], probe or ProbeChoice())
        check_capacity(
            hosts, facts, plan, nodes[0][1]["spec"]["output_dir"] if job.output else None
        )
        refused = check_data(hosts[0], facts[0], job, plan)[1]  # the rows, with its tokenizer
        if refused:
            raise VeriError(refused)
        for row in device_rows(hosts, facts, plan):  # every check passed: where it runs, once
            say(device_line(row))
        if dry_run:
            return backend.script(hosts[0], *nodes[0])
        for host, pf in zip(hosts, facts, strict=True):
            host.machine.makedirs(pf.jobs_dir)
        # Every folder built before any node starts: one that cannot be starts nothing.
        all_or_raise(in_parallel(lambda k: create(hosts[k], job, *nodes[k]),
                                 list(range(len(hosts)))))  # fmt: skip
        try:
            ref = backend.submit(job_id, hosts, [d for d, _ in nodes])
        except SubmitError as exc:
            backend.cancel(register(exc.ref, hosts, nodes[0][1]), GRACE_S)  # none keeps running
            raise exc.cause from None
        target = register(ref, hosts, nodes[0][1])
        start_watcher(target)
        if wait:
            wait_settled(target, lambda: backend.state(target), 1.0)
        return job_id
    finally:
        for host in hosts:
            host.machine.close()
