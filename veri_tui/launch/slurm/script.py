"""The batch script of a Slurm job, `<job_dir>/sbatch.sh` (docs/slurm.md explains each line).

It is made from the job's record alone (spec["slurm"], its node and rank layout), so a
resume writes the same script again and `launch --dry-run` prints what would be submitted.
The batch shell becomes the supervisor (`exec`) on the allocation's first node; the
supervisor starts torchrun on every node with srun (veri_tui/jobfolder/supervise.py).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

#: The file name in the job folder.
SCRIPT = "sbatch.sh"
#: Seconds before the time limit at which the batch shell (the supervisor) gets SIGUSR1: time
#: for the ranks to save a checkpoint at a step boundary (the job side's preemption path).
SIGNAL_LEAD_S = 120


def probes(spec: Mapping[str, Any]) -> bool:
    """Whether the batch job probes its nodes before training (docs/probe.md): several nodes,
    or 2 GPUs or more of one, unless the launch said --no-probe (spec["slurm"]["probe"])."""
    slurm = spec["slurm"]
    if slurm.get("probe") == "off":
        return False
    return int(slurm.get("nodes") or 1) > 1 or int(slurm.get("gpus_per_node") or 0) > 1


def probe_step(spec: Mapping[str, Any], argv: Sequence[str]) -> list[str]:
    """The probe's lines: `python -m veri_tui.jobfolder.probe.slurmprobe` with the supervisor's
    interpreter and PYTHONPATH, the job ending when it refuses a node. A time-limit SIGUSR1
    during it is held (bash's default would end the job with nothing recorded)."""
    if not probes(spec):
        return []
    at = list(argv).index("veri_tui.jobfolder.supervise")
    step = [*argv[:at], "veri_tui.jobfolder.probe.slurmprobe", *argv[at + 1 :]]
    return ["trap 'veri_usr1=1' USR1", f"{shlex.join(step)} || exit $?", "trap - USR1"]


def batch_script(job_id: str, job_dir: str, spec: Mapping[str, Any], argv: Sequence[str]) -> str:
    """The script for the job ``job_id`` in ``job_dir`` whose spec is ``spec``; ``argv``: the
    supervisor as the login node starts it (`env PYTHONPATH=... python -m
    veri_tui.jobfolder.supervise --job <job_dir>/job.json`)."""
    slurm = spec["slurm"]
    nodes = int(slurm.get("nodes") or 1)
    lines = ["#!/bin/bash", f"#SBATCH --job-name=veri-{job_id}"]
    lines.append(f"#SBATCH --partition={slurm['partition']}")
    for key in ("account", "qos", "time"):
        if slurm.get(key):
            lines.append(f"#SBATCH --{key}={slurm[key]}")
    lines += [f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    gpus = int(slurm.get("gpus_per_node") or 0)
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    else:  # CPU ranks: the one task per node gets a core per rank, so srun can place them
        ranks = int(spec.get("nproc_per_node") or spec.get("gpu_count") or 1)
        lines.append(f"#SBATCH --cpus-per-task={ranks}")
    if slurm.get("exclude"):
        lines.append(f"#SBATCH --exclude={slurm['exclude']}")
    lines += [
        f"#SBATCH --output={posixpath.join(job_dir, 'slurm-%j.out')}",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:USR1@{SIGNAL_LEAD_S}",
        *probe_step(spec, argv),
        f"exec {shlex.join(argv)}",
    ]
    return "\n".join(lines) + "\n"
