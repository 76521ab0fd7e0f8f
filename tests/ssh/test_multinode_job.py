"""A 2-node job over two real sshd servers (two ports, two host keys) on this machine, one
CPU process per node (gloo), joined by torchrun's c10d rendezvous: it succeeds through
`veri-tui launch --host n0 --host n1 --wait`, and its final loss equals a 1-node 2-process
run of the same job (fp32 master weights) within the equivalence tolerance of
tests/trainer/test_trainer_equivalence.py (0.2% relative after the first step). The launch
probes the nodes first (docs/probe.md): the plan takes the measured network, job.json keeps it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from multinode_helpers import losses, two_node_env
from ssh_helpers import cli

from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.trial, pytest.mark.timeout(300)]

JOB = ["--model", str(bundled_tiny_model()), "--set", "max_steps=4", "--set",
       "max_seq_length=64", "--set", "precision=fp32", "--set", "zero_stage=0"]  # fmt: skip


def test_two_node_job_succeeds_and_trains_as_one_node(sshd, sshd2, tmp_path: Path) -> None:
    env = two_node_env(sshd, sshd2, tmp_path, probe=True)
    out = cli("launch", "--host", sshd.alias, "--host", sshd2.alias, "--wait", *JOB, env=env,
              timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.splitlines()[0]
    assert "nodes: 2 x 1 GPU (veri-test, veri-test-2)" in out.stdout
    assert "dp=2" in out.stdout
    # Each node has its own folder; node 0 holds rank 0's log and the artifact.
    remote = tmp_path / "remote-veri" / "jobs"
    node0, node1 = remote / f"{job_id}-node0", remote / f"{job_id}-node1"
    two_nodes = losses(node0)
    assert len(two_nodes) == 4
    assert (node0 / "output" / "config.json").is_file()
    assert (node0 / "pids" / "rank-0").is_file() and (node1 / "pids" / "rank-1").is_file()
    # The launch probed the nodes first: the plan's network is the measured one, recorded.
    probe = json.loads((node0 / "job.json").read_text())["probe"]
    assert probe["key"] == f"hosts:{sshd.alias},{sshd2.alias}" and probe["internode_gbps"] > 0
    assert f"{round(probe['internode_gbps'], 3):g} Gb/s per node across (measured by" in out.stdout
    spec1 = json.loads((node1 / "job.json").read_text())["spec"]
    assert spec1["nnodes"] == 2 and spec1["node_rank"] == 1 and spec1["nproc_per_node"] == 1
    listed = json.loads(cli("jobs", "--json", env=env).stdout)
    mine = [r for r in listed if r["job_id"] == job_id]
    assert len(mine) == 1 and mine[0]["status"] == "succeeded"
    assert [n["host"] for n in mine[0]["nodes"]] == [sshd.alias, sshd2.alias]
    # The same job on one machine, two processes.
    local = cli("launch", "--gpu-count", "2", "--wait", *JOB, env=env, timeout=240)
    assert local.returncode == 0, local.stderr[-3000:]
    one_node = losses(tmp_path / "local-veri" / "jobs" / local.stdout.splitlines()[0])
    assert one_node[0] == pytest.approx(two_nodes[0], abs=1e-4)
    assert one_node[-1] == pytest.approx(two_nodes[-1], rel=2e-3)
    print(f"final loss: 2 nodes {two_nodes[-1]:.6f}, 1 node x 2 {one_node[-1]:.6f}")
