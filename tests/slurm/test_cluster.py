"""The test cluster itself: two nodes, srun across both, gres as configured."""

from __future__ import annotations

from support.slurm_cluster import NODES, SlurmCluster


def test_srun_runs_one_task_on_each_node(slurm: SlurmCluster) -> None:
    out = slurm.run(
        "srun", "-N2", "--ntasks-per-node=1", "-p", "debug",
        "bash", "-c", 'echo "$SLURM_NODEID $SLURMD_NODENAME"',
    )  # fmt: skip
    assert sorted(out.split("\n")[:2]) == [f"0 {NODES[0]}", f"1 {NODES[1]}"]
    hosts = slurm.run("scontrol", "show", "hostnames", ",".join(NODES)).split()
    assert hosts == list(NODES)
