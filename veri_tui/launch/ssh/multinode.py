"""A job over several SSH hosts: one node each, joined by torchrun's c10d rendezvous.

Every host is preflighted in parallel (threads) as a one-host launch is, and the hosts must
agree (Python and torch versions, GPU type and count); node 0's rendezvous port must be
reachable from every other node, probed from those nodes over their own SSH sessions while a
short-lived listener holds the port on node 0. Then each node gets its own job folder
(`<remote veri home>/jobs/<job id>-node<k>`, distinct even on a shared home) and its own
detached supervisor, which runs `torchrun --nnodes N --rdzv-backend c10d ...`
(jobfolder/supervise.py). The job's state is gathered from every node (multinode_state.py).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.spec import check_job, local_dataset, new_job_id
from veri_tui.launch.ssh import registry
from veri_tui.launch.ssh.connection import Connection, command_line
from veri_tui.launch.ssh.launch import (
    _upload,
    check_output,
    plan_for_host,
    preflight_job,
    remote_record,
    start_supervisor,
)
from veri_tui.launch.ssh.preflight import Preflight, remote_python

T = TypeVar("T")

#: Seconds the rendezvous probe waits for each connection from another node.
PROBE_TIMEOUT_S = 3

# Runs on node 0: hold the rendezvous port (all interfaces, as torch's store does), say
# "ready", accept the other nodes' probes, end after `count` of them or `wait` seconds.
# Torch's store binds this port next (without SO_REUSEADDR): no TIME_WAIT may be left here.
LISTEN_SCRIPT = r"""
import socket, sys, time
port, count, wait = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
try:
    s.bind(("", port))
except OSError as exc:
    print("bind-failed", exc, flush=True)
    sys.exit(3)
s.listen(16)
print("ready", s.getsockname()[1], flush=True)
s.settimeout(0.5)
end = time.monotonic() + wait
while count and time.monotonic() < end:
    try:
        c = s.accept()[0]
        c.settimeout(3)
        c.recv(1)  # the prober closes first: TIME_WAIT stays on its side, the port is free
        c.close()
        count -= 1
    except OSError:
        pass
"""
# Runs on node k: connect to node 0's rendezvous as torchrun will.
PROBE_SCRIPT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3])).close()
except OSError as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
"""
FREE_PORT_SCRIPT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


def in_parallel(call: Callable[[T], Any], items: list[T]) -> list[Any]:
    """`call(item)` for every item on its own thread; results (or the exception) in order."""

    def safe(item: T) -> Any:
        try:
            return call(item)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller, per item
            return exc

    with ThreadPoolExecutor(max_workers=max(len(items), 1)) as pool:
        return list(pool.map(safe, items))


def node_dir(veri_home: str, job_id: str, node: int) -> str:
    """Node k's job folder on its host."""
    return posixpath.join(veri_home, "jobs", f"{job_id}-node{node}")


def split_endpoint(endpoint: str | None) -> tuple[str | None, int | None]:
    """`addr[:port]` -> (addr, port or None); None -> (None, None)."""
    if not endpoint:
        return None, None
    addr, sep, port = endpoint.rpartition(":")
    return (addr, int(port)) if sep and port.isdigit() else (endpoint, None)


def agreement(pfs: list[Preflight]) -> list[Refusal]:
    """The hosts must agree on Python, torch and the GPUs: one line per fact that differs."""

    def facts(pf: Preflight) -> dict[str, str]:
        names = sorted({g["name"] for g in pf.gpus}) or ["CPU"]
        return {
            "python": ".".join(str(pf.facts.get("python", "")).split(".")[:2]),
            "torch": str(pf.facts.get("torch")),
            "GPUs": f"{len(pf.gpus)} x {'/'.join(names)}",
        }

    out = []
    seen = [facts(pf) for pf in pfs]
    for what in ("python", "torch", "GPUs"):
        values = {s[what] for s in seen}
        if len(values) > 1:
            each = ", ".join(f"{pf.host}: {s[what]}" for pf, s in zip(pfs, seen, strict=True))
            msg = f"the nodes differ in {what} ({each}); every node must run the same"
            out.append(Refusal("hosts", msg + " (unequal nodes are not supported)"))
    return out


def probe_rendezvous(conns: list[Connection], job: Any) -> tuple[str, int, int, list[Refusal]]:
    """(address, port) of node 0's rendezvous as the other nodes reach it, the port node 0
    listens on, and the problems: that port taken on node 0, or a node that cannot connect
    to it (each named)."""
    python, host0 = remote_python(), conns[0].spec.alias
    port = job.rdzv_port
    if port is None:
        res = conns[0].run([python, "-c", FREE_PORT_SCRIPT], timeout=30)
        port = int(res.text.split()[-1])
    addr, reach_port = split_endpoint(job.rdzv_endpoint)
    addr, reach_port = addr or conns[0].spec.hostname, reach_port or port
    others = conns[1:]
    listen = [python, "-c", LISTEN_SCRIPT, str(port), str(len(others)), "30"]
    chan = conns[0].exec_channel(command_line(listen))
    try:
        first = chan.makefile("r").readline().split()
        if not first or first[0] != "ready":
            why = " ".join(first[1:]) or "no answer"
            msg = f"port {port} cannot be opened on node 0 ({host0}): {why}; set rdzv_port"
            return addr, reach_port, port, [Refusal("rdzv_port", msg)]

        def probe(conn: Connection) -> str:
            argv = [python, "-c", PROBE_SCRIPT, addr, str(reach_port), str(PROBE_TIMEOUT_S)]
            res = conn.run(argv, timeout=PROBE_TIMEOUT_S + 30)
            return "" if res.exit_status == 0 else (res.text.strip() or res.error_line())

        problems = []
        for k, (conn, why) in enumerate(zip(others, in_parallel(probe, others), strict=True), 1):
            if isinstance(why, Exception) or why:
                problems.append(
                    Refusal(
                        "rdzv_endpoint",
                        f"node {k} ({conn.spec.alias}) cannot reach node "
                        f"0's rendezvous at {addr}:{reach_port} ({why}); open that port on "
                        f"node 0 ({host0}) to the other nodes, or set rdzv_endpoint to an "
                        "address they reach",
                    )  # fmt: skip
                )
        return addr, reach_port, port, problems
    finally:
        chan.close()


def preflight_nodes(
    job: Any, hosts: list[str], trust_host: str | None, dataset_bytes: int
) -> tuple[list[Connection], list[Preflight], Any, list[Refusal]]:
    """Connect and preflight every host in parallel; (conns, preflights, job with its
    gpu_count and layout set, problems). A host that cannot be reached raises."""
    opened = in_parallel(lambda h: Connection.open(h, trust=trust_host), hosts)
    conns = [c for c in opened if isinstance(c, Connection)]
    failed = [e for e in opened if isinstance(e, Exception)]
    if failed:
        for conn in conns:
            conn.close()
        raise failed[0]
    nodes = len(hosts)
    given = "gpu_count" in job.model_fields_set
    per_node = job.gpu_count // nodes if given else 1
    probe_job = job.model_copy(update={"gpu_count": per_node})
    pfs = in_parallel(lambda c: preflight_job(c, probe_job, dataset_bytes), conns)
    errors = [e for e in pfs if isinstance(e, Exception)]
    if errors:
        for conn in conns:
            conn.close()
        raise errors[0]
    problems = [p for pf in pfs for p in pf.problems] + agreement(pfs)
    if not given:
        per_node = len(pfs[0].gpus) or 1  # detected: nodes x GPUs per node
    job = job.model_copy(update={"gpu_count": nodes * per_node, "hosts": list(hosts)})
    return conns, pfs, job, problems


def launch_nodes(
    job_config: Any, hosts: list[str], *, trust_host: str | None = None, wait: bool = False
) -> str:
    """Preflight every host, plan for what they have, upload to each and start every node's
    supervisor; returns the one job id."""
    check_job(job_config, output_here=False)
    conns, pfs, job, problems = preflight_nodes(
        job_config, hosts, trust_host, local_dataset(job_config).stat().st_size
    )
    try:
        addr, port, listen_port, rdzv_problems = probe_rendezvous(conns, job)
        problems += rdzv_problems
        if problems:
            raise VeriError(list(dict.fromkeys(problems)))
        if job.output:
            job = check_output(conns[0], job, pfs[0])
        job, plan = plan_for_host(job, pfs[0])
        from veri_tui.launch.ssh.node_checks import check_nodes

        check_nodes(conns, pfs, plan, job.output, hosts)  # before anything is created
        job_id = new_job_id()
        nproc = job.gpu_count // len(hosts)

        def start(k: int) -> dict[str, Any]:
            conn, pf = conns[k], pfs[k]
            job_dir = node_dir(pf.veri_home, job_id, k)
            model_path = pf.model_path or posixpath.join(job_dir, "model")
            record = remote_record(job, plan, job_id, job_dir, model_path, hosts[k], pf)
            record["spec"].update(  # type: ignore[typeddict-unknown-key]
                nnodes=len(hosts), node_rank=k, nproc_per_node=nproc, rdzv_id=job_id,
                rdzv_endpoint=f"{addr}:{listen_port if k == 0 else port}",
                rdzv_local_addr=addr, hosts=list(hosts),
            )  # fmt: skip
            from veri_tui.launch.ssh import files

            files.makedirs(conn.sftp(), posixpath.dirname(job_dir))
            _upload(conn, job, record, job_dir)
            pid = start_supervisor(conn, job_dir, remote_python())
            return {"host": hosts[k], "job_dir": job_dir, "pid": pid, "record": record}

        started = in_parallel(start, list(range(len(hosts))))
        nodes = [s for s in started if isinstance(s, dict)]
        entry = registry.RegistryEntry(
            job_id, hosts[0], nodes[0]["job_dir"] if nodes else "", None, remote_python(),
            nodes[0]["record"] if nodes else {}, [{k: v for k, v in n.items() if k != "record"}
                                                  for n in nodes],
        )  # fmt: skip
        if nodes:
            entry.pid = nodes[0]["pid"]
        registry.save(entry)
        broken = [e for e in started if isinstance(e, Exception)]
        if broken:
            from veri_tui.launch.ssh.multinode_state import MultiNodeTarget

            MultiNodeTarget(entry).cancel(job_id)  # no half-started job keeps running
            raise broken[0]
        if wait:
            from veri_tui.launch.ssh.multinode_state import MultiNodeTarget

            MultiNodeTarget(entry).wait(job_id)
        return job_id
    finally:
        for conn in conns:
            conn.close()


def plan_nodes(job: Any, hosts: list[str], trust_host: str | None = None) -> Any:
    """The plan `launch` would make for these hosts (`veri-tui plan --host a --host b`):
    every host's preflight and their agreement refused as launch refuses them."""
    from veri_tui.plan import validate

    errors = validate(job.model_copy(update={"hosts": list(hosts)}))
    if errors:
        raise VeriError(errors)
    conns, pfs, job, problems = preflight_nodes(job, hosts, trust_host, 0)
    for conn in conns:
        conn.close()
    if problems:
        raise VeriError(list(dict.fromkeys(problems)))
    return plan_for_host(job, pfs[0])[1]
