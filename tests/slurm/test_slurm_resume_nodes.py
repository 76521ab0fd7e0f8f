"""`veri-tui resume JOB --nodes N` on the real test cluster: a Slurm job planned again for
another node count, its one global checkpoint (in the folder every node shares) resharded;
`--nodes` on a job that is not a Slurm job is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from launch.launch_helpers import wait_for
from slurm_helpers import cli, home, losses, slurm_job_dir
from support.slurm_cluster import SlurmCluster

from veri_tui.launch import jobs

__all__ = ["home"]  # the fixture, imported for the test below

SLURM = ("--slurm", "local")
pytestmark = [pytest.mark.slow, pytest.mark.trial]  # Slurm jobs: seconds each


def test_resume_on_another_node_count_reshards_the_shared_checkpoint(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    """`veri-tui resume JOB --nodes 1` of a 2-node job: one global checkpoint in the folder
    both nodes share, planned again for 1 node (ranks per node kept) and resharded."""
    code, out, err = cli(capsys, "launch", *SLURM, "--nodes", "2", "--gpus-per-node", "1",
                         "--no-probe",  # the probe step: test_slurm_launch.py's 2-node job
                         "--set", "max_steps=12", "--set", "checkpoint_steps=4")  # fmt: skip
    assert code == 0, err
    job_id = out.strip()
    job_dir = slurm_job_dir(home, job_id)
    wait_for(lambda: (job_dir / "checkpoints" / "step-4").is_dir(), 150, "step-4 committed")
    assert cli(capsys, "cancel", job_id)[:2] == (0, f"job {job_id} cancelled\n")
    code, out, err = cli(capsys, "resume", job_id, "--nodes", "1", "--wait")
    assert code == 0, err + out
    record = jobs.get_job(job_id)
    spec = record["spec"]
    assert (spec["nnodes"], spec["nproc_per_node"], spec["gpu_count"]) == (1, 1, 1)
    assert (
        spec["slurm"]["nodes"] == 1 and "#SBATCH --nodes=1\n" in (job_dir / "sbatch.sh").read_text()
    )
    assert record["status"] == "succeeded"
    first = record["attempts"][1]["resumed_from_step"]
    assert first is not None and first >= 4
    assert f"resume: attempt 2 from step-{first} (verified)" in (job_dir / "log.txt").read_text()
    assert len(losses(job_dir)) == 12  # every step once
    # An SSH or local job has no --nodes to change: refused in one line.
    code, out, err = cli(capsys, "launch", "--set", "max_steps=1", "--wait")
    local = out.splitlines()[0]
    code, _, err = cli(capsys, "resume", local, "--nodes", "2")
    assert code == 2 and err.startswith("error: nodes: --nodes re-plans a Slurm job"), err
