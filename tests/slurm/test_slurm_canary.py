"""The canary on the test Slurm cluster, for real: `veri-tui launch
assets/examples/sft-tiny.toml --canary --max-cost 0.01 --slurm local` submits the job with
sbatch; its supervisor, in the allocation, judges the ranks' canary files and prints the
table into the log this process follows. A dear GPU-hour makes the gate say no-go whatever
this machine's speed: the job ends `cancelled` with the canary's record, and neither a
Slurm job nor a process is left (support/slurm_cluster.py). Over two nodes (one rank on each,
one supervisor in the allocation judging both ranks) a cheap one goes on: the same ranks
finish the job from the canary's step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch.launch_helpers import wait_for
from slurm_helpers import cli, home, processes_of, slurm_job_dir
from support.slurm_cluster import SlurmCluster

from veri_tui.bundled import assets_dir

__all__ = ["home"]  # the fixture, imported for the test below

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
EXAMPLE = str(assets_dir() / "examples" / "sft-tiny.toml")
CANARY = ("launch", EXAMPLE, "--canary", "--max-cost", "0.01", "--slurm", "local")


def test_a_no_go_canary_on_slurm_leaves_a_record_and_nothing_running(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    code, out, err = cli(capsys, *CANARY, "--partition", "debug", "--gpus-per-node", "2",
                         "--set", "price_per_gpu_hour=1000")  # fmt: skip
    assert code == 1, out[-3000:] + err[-3000:]
    job_id = out.splitlines()[0]
    assert "canary: 3 steps on cpu x2 (the longest samples first)" in out
    assert "  extrapolated: " in out and "at $1000/GPU-hour" in out
    job_dir = slurm_job_dir(home, job_id)
    record = json.loads((job_dir / "job.json").read_text())
    assert record["status"] == "cancelled" and record["error"] is None
    line = record["canary"]["line"]
    assert line.startswith("canary: no-go: --max-cost 0.01: extrapolated $")
    assert err.splitlines()[-1] == f"job {job_id} cancelled: {line}"
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to end")
    assert processes_of(job_dir) == [] and not (job_dir / "output").exists()


def test_a_go_canary_over_two_slurm_nodes_finishes_in_the_same_ranks(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    two = ("--nodes", "2", "--gpus-per-node", "1", "--no-probe")  # probed: test_slurm_launch
    cheap = ("--set", "price_per_gpu_hour=0.0001")
    code, out, err = cli(capsys, *CANARY, "--partition", "debug", *two, *cheap, "--wait")
    assert code == 0, out[-3000:] + err[-3000:]
    job_id = out.splitlines()[0]
    assert "canary: 3 steps on cpu x2 (the longest samples first)" in out  # both nodes' ranks
    assert "canary: go (max cost $0.01" in out
    job_dir = slurm_job_dir(home, job_id)
    record = json.loads((job_dir / "job.json").read_text())
    assert record["status"] == "succeeded" and record["canary"]["decision"] == "go"
    assert (record["spec"]["nnodes"], record["spec"]["nproc_per_node"]) == (2, 1)
    for rank in (0, 1):  # each node's rank measured, saved and loaded back its checkpoint
        assert json.loads((job_dir / "canary" / f"rank-{rank}.json").read_text())["resume_ok"]
    log = (job_dir / "log.txt").read_text()
    assert log.count("setup: model") == 1 and '"step": 5' in log  # no second load
    assert (job_dir / "output" / "config.json").is_file()
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to end")
    assert processes_of(job_dir) == []
