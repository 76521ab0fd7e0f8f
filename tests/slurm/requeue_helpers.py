"""Helpers for the job-side Slurm tests: a job folder and batch script as the launch side
writes them (docs/slurm.md), submitted with a plain `sbatch`, and waits on its record.

The job folder is the local launcher's (the record from veri_tui's planning and
`build_record`, the folders of `MADE_WITH`), with the Slurm keys of the contract added:
`spec.slurm`, `nnodes`, `nproc_per_node` = ranks per node. The batch script has the
contract's lines; its last one `exec`s the supervisor with this checkout on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.slurm_cluster import SlurmCluster

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import MADE_WITH
from veri_tui.jobfolder.contract.record import read_job
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch.replan import resume_spec
from veri_tui.launch.spec import build_record
from veri_tui.plan import load_job_config, plan_job

REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY = 40, 10  # the job: 40 steps of the tiny model, a checkpoint every 10


def job_sets(**more: Any) -> list[str]:
    """The job's --set values: the steps, the checkpoints, and ``more``."""
    knobs = {"max_steps": STEPS, "checkpoint_steps": EVERY, **more}
    return [f"{k}={v}" for k, v in knobs.items()]


def make_job(
    root: Path, job_id: str, nodes: int, per_node: int, slurm: bool = True, **more: Any
) -> Path:
    """A Slurm job folder under ``root``, planned for nodes x per_node CPU ranks (``slurm``
    False: a local job's, the same plan); its job.json."""
    job_dir = root / job_id
    for sub in MADE_WITH:
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    job = load_job_config(None, gpu_count=nodes * per_node, sets=job_sets(**more))
    record = build_record(job, plan_job(job), job_id, job_dir)
    if slurm:
        place(record, nodes, per_node)
    write_json_atomic(job_dir / "job.json", record)
    return job_dir / "job.json"


def place(record: dict[str, Any], nodes: int, per_node: int) -> None:
    """Set the record's Slurm keys for nodes x per_node ranks on the test cluster."""
    slurm = {"login": "local", "partition": "debug", "nodes": nodes, "gpus_per_node": 0,
             "account": None, "time": None, "qos": None}  # fmt: skip
    record["spec"].update(slurm=slurm, nnodes=nodes, nproc_per_node=per_node)


def replace_layout(job_path: Path, nodes: int, per_node: int) -> None:
    """Plan the job again for another layout (its global batch kept: veri_tui.launch.replan,
    what `veri-tui resume --gpu-count` uses), as a resume on another node count does."""
    record = read_job(job_path)
    spec = resume_spec(record, nodes * per_node, [], lambda job: (job, plan_job(job)))
    if spec is not None:  # None: the same rank count, the same plan
        record["spec"] = spec
    record["resolved_parallelism"] = dict(record["spec"].get("resolved_parallelism") or {})
    place(record, nodes, per_node)  # type: ignore[arg-type]
    write_json_atomic(job_path, record)


def batch_script(job_path: Path, nodes: int, per_node: int) -> str:
    """The contract's batch script for this job (CPU partition: --cpus-per-task = ranks)."""
    job_dir = job_path.parent
    return "\n".join(
        [
            "#!/bin/bash",
            f"#SBATCH --job-name=veri-{job_dir.name}",
            "#SBATCH --partition=debug",
            f"#SBATCH --nodes={nodes}",
            "#SBATCH --ntasks-per-node=1",
            f"#SBATCH --cpus-per-task={per_node}",
            f"#SBATCH --output={job_dir}/slurm-%j.out",
            "#SBATCH --open-mode=append",
            "#SBATCH --requeue",
            "#SBATCH --signal=B:USR1@120",
            f"exec env PYTHONPATH={REPO} {sys.executable} -m veri_tui.jobfolder.supervise "
            f"--job {job_path}",
            "",
        ]
    )


def submit(
    slurm: SlurmCluster,
    job_path: Path,
    nodes: int,
    per_node: int,
    *opts: str,
    env: dict[str, str] | None = None,
) -> str:
    """Write <job_dir>/sbatch.sh and submit it (``env``: more environment, which sbatch
    passes on to the job); the Slurm job id."""
    script = job_path.parent / "sbatch.sh"
    script.write_text(batch_script(job_path, nodes, per_node))
    out = subprocess.run(
        ["sbatch", "--parsable", *opts, str(script)],
        env={**os.environ, **slurm.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def wait_record(job_path: Path, pred: Any, timeout: float, what: str) -> dict[str, Any]:
    """Poll job.json until ``pred(record)``; fail with the record and the log's end."""
    deadline = time.monotonic() + timeout
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            record = dict(read_job(job_path))
        except (OSError, ValueError):
            record = {}
        if record and pred(record):
            return record
        time.sleep(0.2)
    log = job_path.parent / "log.txt"
    tail = log.read_text()[-3000:] if log.exists() else "(no log)"
    raise AssertionError(f"timed out waiting for {what}: {json.dumps(record)[-2000:]}\n{tail}")


def wait_ended(job_path: Path, timeout: float) -> dict[str, Any]:
    """The record once the job has an outcome."""
    return wait_record(job_path, has_ended, timeout, "the job to end")


def losses(job_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of every metric line."""
    lines = (job_dir / "metrics.jsonl").read_text().splitlines()
    return [(m["step"], m["loss"]) for m in map(json.loads, lines)]
