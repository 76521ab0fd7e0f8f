"""`veri-tui probe --slurm`: the probe on the nodes of a Slurm allocation.

Inside an allocation ($SLURM_JOB_ID: `salloc -N 2 veri-tui probe --slurm`, or a batch
script) its nodes are probed; outside one, srun allocates `--nodes` of `--partition` (the
default partition when not given) for the probe alone. One srun task per node, each
`python -m veri_tui.trainer.gpuhealth`, then its node's torchrun (torch's static rendezvous on the
allocation's first host, as a Slurm job's own, veri_tui/jobfolder/supervise/srun_tasks.py) running
`veri_tui.trainer.probe`. The tasks import this installation's trainer (PYTHONPATH: the folder it is
in), which a cluster's shared filesystem shows every node, as `launch --slurm local` relies on; srun
passes the environment on (VERI_PROBE_DELAY included). Cached per partition, where
`veri-tui plan --slurm local --partition P --nodes N` finds it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence

from veri_tui.errors import VeriError
from veri_tui.jobfolder.probe.probe_verdict import (
    HEALTH_MARK,
    PROBE_MARK,
    SRUN_TASK,
    marked,
    srun_names,
)
from veri_tui.launch.local_host import local_code
from veri_tui.launch.probe.fleet import PROBE_TIMEOUT_S, probe_env
from veri_tui.launch.probe.report import ProbeReport
from veri_tui.launch.slurm.partition import probe_key


def _default_partition() -> str:
    from veri_tui.launch.local_host import LocalHost
    from veri_tui.launch.slurm.partition import read_partition

    host = LocalHost()
    return read_partition(lambda argv: host.machine.run(argv), None, "this machine").name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def probe_allocation(partition: str | None, nodes: int | None, ranks_per_node: int | None,
                     sizes: Sequence[int] | None) -> ProbeReport:  # fmt: skip
    """Probe this allocation's nodes (or those srun allocates); VeriError when it fails."""
    inside = bool(os.environ.get("SLURM_JOB_ID"))
    if inside:
        partition = os.environ.get("SLURM_JOB_PARTITION") or partition or _default_partition()
        nodes = nodes or int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get(
            "SLURM_NNODES") or 1)  # fmt: skip
    else:
        partition = partition or _default_partition()
        nodes = nodes or 1
    # Every GPU a node has; CPU nodes one rank each (two on one node: else nothing to time).
    ranks = ranks_per_node or int(os.environ.get("SLURM_GPUS_ON_NODE") or (1 if nodes > 1 else 2))
    argv = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--cpus-per-task={ranks}", "--job-name=veri-probe"]  # fmt: skip
    if not inside:
        argv.append(f"--partition={partition}")
    extra = ["--sizes", ",".join(map(str, sizes))] if sizes else []
    argv += ["bash", "-c", SRUN_TASK, "veri-probe", sys.executable, str(_free_port()), str(ranks),
             *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=local_code())
    env.update(entry.partition("=")[::2] for entry in probe_env())
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)  # fmt: skip
    except FileNotFoundError:
        raise VeriError(
            "srun is not on PATH: run it where Slurm's clients are (a login "
            "node), or probe SSH hosts with --host",
            key="slurm",
        ) from None
    except subprocess.TimeoutExpired:
        raise VeriError(
            f"the probe did not end within {PROBE_TIMEOUT_S:.0f} s on partition {partition}",
            key="probe",
        ) from None
    names = srun_names(done.stdout)
    records = marked(done.stdout, PROBE_MARK)
    if not records:
        tail = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-3:]
        raise VeriError(f"the probe failed on partition {partition} (srun exit "
                        f"{done.returncode}): {' | '.join(tail)}", key="probe")  # fmt: skip
    labels = [names.get(str(k), f"node {k}") for k in range(nodes)]
    health = sorted(marked(done.stdout, HEALTH_MARK), key=lambda h: int(h.get("node") or 0))
    report = ProbeReport(probe_key(partition), labels, records[0], health)
    report.exclude = "allocate without it: salloc/sbatch --exclude={name}"
    return report
