"""The canary over SSH, for real: `veri-tui launch assets/examples/sft-tiny.toml --canary
--max-cost 0.01` on one SSH host (2 CPU ranks there) and over two (one rank on each node,
torchrun's c10d rendezvous, a folder and a supervisor per node, each judging its own ranks).
The price per GPU-hour makes each gate's answer certain: the one-host job goes on to its
artifact; the two-node job stops at the gate on both nodes, with a clear record and no
process on either. Both start at once (one module fixture)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from multinode_helpers import two_node_env

from veri_tui.bundled import assets_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(500)]
EXAMPLE = str(assets_dir() / "examples" / "sft-tiny.toml")
CANARY = [sys.executable, "-m", "veri_tui", "launch", EXAMPLE, "--canary", "--max-cost", "0.01"]


@pytest.fixture(scope="module")
def runs(sshd, sshd2, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The one-host run (go) and the two-node run (no-go), with their environment."""
    tmp = tmp_path_factory.mktemp("ssh-canary")
    env = two_node_env(sshd, sshd2, tmp)
    argv = {
        "one": [*CANARY, "--host", sshd.alias, "--set", "price_per_gpu_hour=0.0001", "--wait"],
        "two": [*CANARY, "--host", sshd.alias, "--host", sshd2.alias,
                "--set", "price_per_gpu_hour=1000"],
    }  # fmt: skip
    procs = {k: subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env) for k, a in argv.items()}  # fmt: skip
    done = {}
    for k, p in procs.items():
        out, err = p.communicate(timeout=420)
        done[k] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    yield {"remote": tmp / "remote-veri" / "jobs", **done}


def test_one_host_prints_the_table_and_goes_on_to_the_artifact(runs: dict) -> None:
    out = runs["one"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.splitlines()[0]
    assert "canary: 3 steps on cpu x2 (the longest samples first), planned for" in out.stdout
    assert "  extrapolated: " in out.stdout and "canary: go (max cost $0.01" in out.stdout
    job_dir = runs["remote"] / job_id
    record = json.loads((job_dir / "job.json").read_text())
    assert record["status"] == "succeeded" and record["canary"]["decision"] == "go"
    assert (job_dir / "output" / "config.json").is_file()
    assert (job_dir / "log.txt").read_text().count("setup: model") == 1


def test_two_nodes_stop_together_at_the_gate_with_no_process_left(runs: dict) -> None:
    out = runs["two"]
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.splitlines()[0]
    assert "canary: 3 steps on cpu x1" in out.stdout  # node 0's own rank, judged there
    assert out.stderr.splitlines()[-1].startswith(
        f"job {job_id} cancelled: canary: no-go: --max-cost 0.01: extrapolated $"
    )
    dirs = [runs["remote"] / f"{job_id}-node{k}" for k in (0, 1)]
    for k, node in enumerate(dirs):  # each node's rank-local checkpoint loaded back there
        assert json.loads((node / "canary" / f"rank-{k}.json").read_text())["resume_ok"]
    for node in dirs:
        record = json.loads((node / "job.json").read_text())
        assert record["status"] == "cancelled", record
        assert record["canary"]["decision"] == "no-go"
        outcome = json.loads((node / "canary" / "outcome.json").read_text())
        assert outcome["go"] is False
        assert leftover_pids(node) == []
        assert not (node / "output").exists()
