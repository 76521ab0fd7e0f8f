"""A real Slurm cluster on this machine for the Slurm tests: munged, slurmctld and two slurmd.

Debian's slurm-wlm (22.05) and munge, nothing mocked. Everything lives in one temporary
folder: the munge key and socket, slurm.conf, the controller's state, each
node's spool and logs. Daemons listen on free loopback ports.

Two compute nodes on one box: two slurmd processes (`slurmd -N <name>`), each with its own
`Port`. Slurm's "multiple slurmd" build flag is not needed for that: what a stock build refuses
is two nodes with the same `NodeHostname` ("Duplicated NodeHostName"), so each node gets its
own (lo1, lo2), all reached at NodeAddr 127.0.0.1. The node names are 127.0.0.1 and 127.0.0.2:
`scontrol show hostnames` then gives names that resolve on any Linux box without /etc/hosts
entries (the whole of 127/8 is loopback), so a job's rendezvous on its first host works as
on a real cluster, where node names are host names. docs/slurm.md, The test cluster.

Settings chosen for a box with no cgroups (gVisor here, containers in CI): proctrack/linuxproc
(a job's processes are found by parentage; pgid would miss torchrun's workers, which run in
their own sessions), task/none, select/cons_tres with CR_CPU, no accounting (no slurmdbd), and
`cred_expire=10`: a requeued job waits that long plus one second before it may start again
(Slurm's default is 120 s). Partitions: `debug` (both running nodes, CPU only, the default),
`gpu` (node 127.0.0.3, `Gres=gpu:h100:2`) and `odd` (node 127.0.0.4, `Gres=gpu:mystery:1`,
an unknown GPU type). The two GPU nodes are configured but no slurmd runs for them (State=DOWN
with a reason): the controller still reports their gres, which is all a plan reads, and a job
sent there waits PENDING with its reason; the running nodes carry no gres, so `debug` is the
CPU partition it is meant to be.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from support import server_port

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
NODES = ("127.0.0.1", "127.0.0.2")
#: Configured, never started (no slurmd): their gres is only read by plans.
GPU_NODES = {"127.0.0.3": "gpu:h100:2", "127.0.0.4": "gpu:mystery:1"}


def missing_tools() -> list[str]:
    """The Slurm and munge programs this machine lacks (empty: a cluster can start)."""
    return [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]


@dataclass
class SlurmCluster:
    """The running test cluster; ``env`` is what a Slurm client needs to reach it."""

    root: Path
    cpus_per_node: int = 2
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """A Slurm client command against this cluster; its stdout."""
        out = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.env},
            check=False,
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {out.returncode}: {out.stderr.strip()}")
        return out.stdout

    def start(self) -> None:
        """Write the configuration, start every daemon, wait until both nodes are idle."""
        for sub in ("etc", "munge", "state", "log", *(f"spool/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._start_munge()
        self._write_config()
        log = self.root / "log"
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)], log / "ctld.out")
        self._wait(lambda: self.run("sinfo", "-h", check=False) != "", "slurmctld to answer")
        for name in NODES:
            cmd = ["slurmd", "-D", "-N", name, "-f", str(self.conf)]
            self._spawn(f"slurmd-{name}", cmd, log / f"slurmd-{name}.out")
        self._wait(self._all_idle, "both nodes to be idle")

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.chmod(0o755)  # munged wants its socket's folder reachable by everyone
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = munge / "munge.sock"
        cmd = [
            "munged", "-F", "--force", f"--key-file={key}", f"--socket={sock}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ]  # fmt: skip
        self._spawn("munged", cmd, munge / "munged.out")
        self._wait(sock.exists, "munged's socket")

    def _write_config(self) -> None:
        root, cpus = self.root, self.cpus_per_node
        ports = {name: server_port() for name in NODES}
        lines = [
            "ClusterName=veritest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={server_port()}",
            f"SlurmdPort={server_port()}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.sock'},cred_expire=10",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'log'}/slurmd-%n.pid",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "GresTypes=gpu",
            # 30 s, not 10: under load (a parallel test run) the ranks of a requeued job took
            # about 20 s to finish their step and checkpoint, past a 10 s KillWait.
            "KillWait=30",
            "MinJobAge=3600",
            "InactiveLimit=0",
            "SlurmdTimeout=60",
        ]
        for i, name in enumerate(NODES, start=1):
            lines.append(
                f"NodeName={name} NodeHostname=lo{i} NodeAddr=127.0.0.1 Port={ports[name]} "
                f"CPUs={cpus} RealMemory=4000 State=UNKNOWN"
            )
        for i, (name, gres) in enumerate(GPU_NODES.items(), start=len(NODES) + 1):
            lines.append(
                f"NodeName={name} NodeHostname=lo{i} NodeAddr=127.0.0.1 Port={server_port()} "
                f'CPUs=8 RealMemory=64000 Gres={gres} State=DOWN Reason="plans only"'
            )
        gpu, odd = GPU_NODES
        lines += [
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
            f"PartitionName=gpu Nodes={gpu} MaxTime=INFINITE State=UP",
            f"PartitionName=odd Nodes={odd} MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, name: str, cmd: list[str], out: Path) -> None:
        with out.open("ab") as fh:
            self.procs[name] = subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env}, start_new_session=True,
            )  # fmt: skip

    def _wait(self, ready: object, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def _all_idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T", check=False)
        idle = [ln for ln in states.splitlines() if ln.split()[-1:] == ["idle"]]
        return len(idle) == len(NODES)

    def logs(self, tail: int = 3000) -> str:
        """The end of every daemon's log, for a failure message."""
        parts = []
        for path in sorted((self.root / "log").glob("*")) + [self.root / "munge" / "munged.out"]:
            if path.is_file():
                parts.append(f"== {path.name}\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    def jobs(self) -> list[str]:
        """Ids of the jobs the controller still has pending, running or completing."""
        return self.run("squeue", "-h", "-o", "%i", check=False).split()

    def cancel_all(self, timeout: float = 30) -> None:
        """scancel every job left and wait until the controller lists none."""
        for job in self.jobs():
            self.run("scancel", job, check=False)
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.3)

    def stop(self) -> None:
        """Cancel what is left, then end every daemon (SIGTERM, SIGKILL after 10 s)."""
        try:
            self.cancel_all()
        except (OSError, subprocess.SubprocessError):
            pass
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
