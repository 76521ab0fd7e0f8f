"""What a job over several hosts needs beyond one host's steps: the hosts must agree, node 0's
rendezvous must be reachable from every other node, and each node holds its share.

- `agreement`: the same Python, torch and GPUs on every node (unequal nodes are refused);
- `probe_rendezvous`: node 0's rendezvous port, held for a moment by a listener on node 0
  and dialled from every other node over its own session, as torchrun's c10d will;
- `node_disk`: what a node writes. Checkpoints of a multi-node job are rank-local
  (veri_tui/trainer/checkpoint.py): under FSDP2 a node holds its ranks' shards, under DDP each rank
  a whole copy; the artifact is rank 0's, on node 0;
- `shared_storage`: whether the nodes' folders are one filesystem (a marker written from
  node 0 seen by the others): where a resume reads their checkpoints.
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from veri_tui.errors import Refusal
from veri_tui.launch.host import Host, HostFacts, Row
from veri_tui.launch.hostpool import in_parallel
from veri_tui.launch.machine import Machine
from veri_tui.plan.disk import DiskEstimate

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord

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


def node_label(k: int, host: str) -> str:
    """`node 1 (b)`: how rows and reports name a node."""
    return f"node {k} ({host})"


def split_endpoint(endpoint: str | None) -> tuple[str | None, int | None]:
    """`addr[:port]` -> (addr, port or None); None -> (None, None)."""
    if not endpoint:
        return None, None
    addr, sep, port = endpoint.rpartition(":")
    return (addr, int(port)) if sep and port.isdigit() else (endpoint, None)


def agreement(facts: list[HostFacts]) -> list[Refusal]:
    """The hosts must agree on Python, torch and the GPUs: one line per fact that differs."""

    def of(pf: HostFacts) -> dict[str, str]:
        names = sorted({g["name"] for g in pf.gpus}) or ["CPU"]
        return {
            "python": ".".join(str(pf.facts.get("python", "")).split(".")[:2]),
            "torch": str(pf.facts.get("torch")),
            "GPUs": f"{len(pf.gpus)} x {'/'.join(names)}",
        }

    out = []
    seen = [of(pf) for pf in facts]
    for what in ("python", "torch", "GPUs"):
        if len({s[what] for s in seen}) > 1:
            each = ", ".join(f"{pf.host}: {s[what]}" for pf, s in zip(facts, seen, strict=True))
            msg = f"the nodes differ in {what} ({each}); every node must run the same"
            out.append(Refusal("hosts", msg + " (unequal nodes are not supported)"))
    return out


def probe_rendezvous(
    hosts: Sequence[Host], port: int | None, endpoint: str | None
) -> tuple[str, int, int, list[Refusal]]:
    """(address, port) of node 0's rendezvous as the other nodes reach it, the port node 0
    listens on (``port``, else a free one), and the problems: that port taken on node 0, or a
    node that cannot connect to it (each named). ``endpoint``: `addr[:port]` the others dial,
    when not node 0's own address and port."""
    head, others = hosts[0].machine, [h.machine for h in hosts[1:]]
    if port is None:
        port = int(head.run([head.python, "-c", FREE_PORT_SCRIPT], timeout=30).text.split()[-1])
    addr, reach = split_endpoint(endpoint)
    addr, reach = addr or head.address, reach or port
    listen = [head.python, "-c", LISTEN_SCRIPT, str(port), str(len(others)), "30"]
    stream = head.stream(listen)
    try:
        first = stream.readline().split()
        if not first or first[0] != "ready":
            why = " ".join(first[1:]) or "no answer"
            msg = f"port {port} cannot be opened on node 0 ({head.name}): {why}; set rdzv_port"
            return addr, reach, port, [Refusal("rdzv_port", msg)]

        def dial(machine: Machine) -> str:
            argv = [machine.python, "-c", PROBE_SCRIPT, addr, str(reach), str(PROBE_TIMEOUT_S)]
            res = machine.run(argv, timeout=PROBE_TIMEOUT_S + 30)
            return "" if res.exit_status == 0 else (res.text.strip() or res.error_line())

        problems = []
        for k, (machine, said) in enumerate(zip(others, in_parallel(dial, others), strict=True), 1):
            if isinstance(said, Exception) or said:  # a host out of reach, or what it said
                problems.append(Refusal(
                    "rdzv_endpoint",
                    f"node {k} ({machine.name}) cannot reach node 0's rendezvous at {addr}:{reach} "
                    f"({said}); open that port on node 0 ({head.name}) to the other nodes, or "
                    "set rdzv_endpoint to an address they reach",
                ))  # fmt: skip
        return addr, reach, port, problems
    finally:
        stream.close()


def node_disk(
    disk: DiskEstimate, zero_stage: int, nodes: int, per_node: int, node: int
) -> DiskEstimate:
    """What node `node` of `nodes` (`per_node` ranks each) writes of the plan's `disk`."""
    if zero_stage == 0:
        checkpoint = disk.checkpoint_bytes * per_node  # every rank a whole copy
    else:
        checkpoint = -(-disk.checkpoint_bytes * per_node // (nodes * per_node))  # its share
    return disk._replace(
        checkpoint_bytes=checkpoint, artifact_bytes=disk.artifact_bytes if node == 0 else 0
    )


def disk_of(plan: PlanRecord, nodes: int, node: int) -> DiskEstimate:
    """What node ``node`` writes of the plan's `disk` (the whole of it on one node)."""
    if nodes == 1:
        whole: DiskEstimate = plan.disk
        return whole
    rp = plan.resolved_parallelism
    per_node = max(1, int(rp["data_parallel_size"]) // nodes)
    return node_disk(plan.disk, int(rp["zero_stage"]), nodes, per_node, node)


def shared_storage(hosts: Sequence[Host], parents: Sequence[str]) -> bool:
    """True when every node sees a marker file node 0 writes in its folders' parent: the
    node folders are then on one filesystem. The marker is removed again."""
    if len(hosts) < 2:
        return False
    name = f".veri-shared-{secrets.token_hex(8)}"
    mark = posixpath.join(parents[0], name)
    hosts[0].machine.write_atomic(mark, b"veri-tui shared storage probe\n")
    try:
        seen = in_parallel(lambda k: hosts[k].machine.exists(posixpath.join(parents[k], name)),
                           list(range(1, len(hosts))))  # fmt: skip
        return all(s is True for s in seen)
    finally:
        try:
            hosts[0].machine.remove(mark)
        except OSError:
            pass  # left behind: a hidden empty file, harmless


def storage_row(hosts: Sequence[Host], jobs_dirs: list[str]) -> Row:
    """Whether the nodes' jobs folders are one filesystem (made when missing, as launch
    makes them); informative: either way the job runs."""
    try:
        for host, folder in zip(hosts, jobs_dirs, strict=True):
            host.machine.makedirs(folder)
        shared = shared_storage(hosts, jobs_dirs)
    except OSError as exc:
        return ("storage", True, f"not checked ({exc})")
    if shared:
        return ("storage", True, "one shared filesystem: node 0 sees every node's job folder "
                "(a resume checks the checkpoints there)")  # fmt: skip
    return ("storage", True, "each node's own disk (a resume asks every node for its checkpoints)")
