"""Running the probe on a job's hosts: this machine, an SSH host, or several (one node each).

On each host, as a job's trainer is: the `veri_tui.trainer` package (uploaded to an SSH host's
`<veri home>/probe/pkg`, used in place here) run by the host's Python. First
`python -m veri_tui.trainer.gpuhealth` on every node at once, then one torchrun per node (torch's
static rendezvous on node 0's address and a port probed free and reachable there, as a job's,
veri_tui/launch/nodes.py) running `veri_tui.trainer.probe`; rank 0's record comes back on its
stdout. `VERI_PROBE_DELAY` (veri_tui/trainer/probe.py) is passed on to the nodes when set here.

As a step of a multi-node launch, and of a launch on 2 GPUs or more of one machine (this one
or one SSH host: their health and the bandwidth among them; `needs_probe`), launching.py
`fleet_probe`: after the hosts agree and node 0's rendezvous is reachable, a probe of the
same host set cached within REUSE_S (`veri-tui probe` just before) is used as it is, else
they are measured now with the job's ranks per node and the result cached. A slow or sick
node (or GPU) refuses the launch by name (report.py), unless the user goes on at their own
risk (`--allow-slow-nodes`); `--no-probe`, or VERI_PROBE=0 in the environment, skips the step
(the plan then keeps the `network` assumption).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veri_tui.errors import VeriError
from veri_tui.jobfolder.probe.probe_verdict import HEALTH_MARK, PROBE_MARK, marked
from veri_tui.launch.host import Host, HostFacts
from veri_tui.launch.hostpool import all_or_raise, in_parallel
from veri_tui.launch.machine import Result
from veri_tui.launch.nodes import probe_rendezvous
from veri_tui.launch.probe.report import ProbeReport, cached, from_dict, hosts_key, save

if TYPE_CHECKING:  # the backends call this module (their probe_nodes): it imports none of them
    from veri_tui.launch.backends.api import AnyBackend, Destination

#: Seconds one node's torchrun may take: start, rendezvous, a few dozen collectives.
PROBE_TIMEOUT_S = 600.0
#: A cached probe this young (seconds) stands for a launch's own.
REUSE_S = 3600.0
#: The way out for a sick or slow GPU of one machine (report.py's EXCLUDE_HINT).
ONE_MACHINE_EXCLUDE = "list only the other GPUs in CUDA_VISIBLE_DEVICES, with a lower --gpu-count"


@dataclass(frozen=True)
class ProbeChoice:
    """Whether a launch probes its nodes, and whether a slow or sick node stops it."""

    run: bool = True
    allow_slow: bool = False


def probe_env() -> list[str]:
    """`KEY=VALUE` entries every probe process gets: one thread per CPU rank (as a job's
    supervisor sets it), and the test-only delay when set here."""
    env = ["OMP_NUM_THREADS=" + os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONUNBUFFERED=1"]
    delay = os.environ.get("VERI_PROBE_DELAY")
    return env + ([f"VERI_PROBE_DELAY={delay}"] if delay else [])


def _failure(host: Host, k: int, what: str, res: Result) -> VeriError:
    tail = (res.stderr or res.stdout).decode("utf-8", "replace").strip().splitlines()
    last = [ln for ln in tail if ln.strip()][-3:] or [f"exit status {res.exit_status}"]
    return VeriError(f"the probe's {what} failed on node {k} ({host.machine.name}): "
                     f"{' | '.join(last)}", key="probe")  # fmt: skip


def ranks_for(facts: list[HostFacts], health: list[dict[str, Any]], given: int | None) -> int:
    """Ranks per node: as given, else every GPU of the smallest node, else CPU processes
    (one a node on several nodes, two on one machine: else nothing is measured)."""
    if given:
        return given
    counts = [len(pf.gpus) or int(h.get("count") or 0) for pf, h in zip(facts, health, strict=True)]
    if min(counts) > 0:
        return min(counts)
    return 1 if len(facts) > 1 else 2


def measure(hosts: Sequence[Host], facts: list[HostFacts], *, ranks_per_node: int | None = None,
            sizes: Sequence[int] | None = None, key: str | None = None) -> ProbeReport:  # fmt: skip
    """Probe these open hosts (node 0 first; ``facts`` their preflight facts)."""
    codes = all_or_raise(in_parallel(lambda k: hosts[k].trainer_path(facts[k]),
                                     list(range(len(hosts)))))  # fmt: skip

    def run_on(k: int, argv: list[str], timeout: float) -> Result:
        env = ["env", f"PYTHONPATH={codes[k]}", *probe_env()]
        return hosts[k].machine.run([*env, hosts[k].machine.python, *argv], timeout=timeout)

    def health_of(k: int) -> dict[str, Any]:
        res = run_on(k, ["-m", "veri_tui.trainer.gpuhealth"], 330)
        found = marked(res.text, HEALTH_MARK)
        if not found:
            raise _failure(hosts[k], k, "GPU health check", res)
        return found[0]

    nodes = len(hosts)
    health = all_or_raise(in_parallel(health_of, list(range(nodes))))
    per_node = ranks_for(facts, health, ranks_per_node)
    rdzv = ["--standalone"]
    if nodes > 1:
        addr, reach, _listen, problems = probe_rendezvous(hosts, None, None)
        if problems:
            raise VeriError(problems)
        rdzv = ["--nnodes", str(nodes), "--master-addr", addr, "--master-port", str(reach)]
    extra = ["--sizes", ",".join(map(str, sizes))] if sizes else []

    def bandwidth_of(k: int) -> Result:
        rank = ["--node-rank", str(k)] if nodes > 1 else []
        argv = ["-m", "torch.distributed.run", *rdzv, *rank, "--nproc-per-node", str(per_node),
                "--max-restarts", "0", "-m", "veri_tui.trainer.probe", *extra]  # fmt: skip
        return run_on(k, argv, PROBE_TIMEOUT_S)

    results = all_or_raise(in_parallel(bandwidth_of, list(range(nodes))))
    records = [r for res in results for r in marked(res.text, PROBE_MARK)]
    if not records:
        bad = next((k for k, res in enumerate(results) if res.exit_status != 0), 0)
        raise _failure(hosts[bad], bad, "bandwidth run (torchrun)", results[bad])
    labels = [h.machine.name if not h.machine.local else "this machine" for h in hosts]
    report = ProbeReport(
        key or hosts_key([h.machine.name for h in hosts]), labels, records[0], health
    )
    if nodes == 1:  # a GPU of this one machine is left out, not the machine
        report.exclude = ONE_MACHINE_EXCLUDE
    return report


def probe_hosts(dest: Destination[Any], trust: str | None = None, *,
                ranks_per_node: int | None = None, sizes: Sequence[int] | None = None,
                ) -> ProbeReport:  # fmt: skip
    """`veri-tui probe [--host ...]`: open the hosts, read their facts, probe them."""
    from veri_tui.plan import load_job_config

    job = load_job_config(None)
    hosts = dest.open(trust)
    try:
        facts = all_or_raise(in_parallel(lambda h: h.probe(job, 0), list(hosts)))
        missing = [r for pf in facts for r in pf.problems if "torch" in r.message]
        if missing:
            raise VeriError(missing)
        key = hosts_key(dest.names) if dest.names else "hosts:local"
        return measure(hosts, facts, ranks_per_node=ranks_per_node, sizes=sizes, key=key)
    finally:
        for host in hosts:
            host.machine.close()


def needs_probe(hosts: Sequence[Host], facts: list[HostFacts], job: Any,
                backend: AnyBackend) -> bool:  # fmt: skip
    """Whether the launch probes its hosts first: several nodes; or one machine (this one, an
    SSH host) whose job runs on 2 of its GPUs or more. Not a Slurm partition (its nodes are
    unknown before the allocation: its cached probe is used; ``backend`` says), nor CPU ranks
    on one machine (no GPU to judge, no link to measure)."""
    if len(hosts) > 1:
        return True
    gpus = len(facts[0].gpus) if facts else 0
    return backend.probes_one_host and gpus >= 2 and int(job.gpu_count or 0) >= 2


def fleet_probe(hosts: Sequence[Host], facts: list[HostFacts], job: Any, choice: ProbeChoice
                ) -> ProbeReport | None:  # fmt: skip
    """The launch's probe of ``hosts`` (None when skipped); VeriError naming each slow or
    sick node, unless ``choice.allow_slow``."""
    if not choice.run or os.environ.get("VERI_PROBE") == "0":
        return None
    key = hosts_key([h.machine.name for h in hosts])
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
