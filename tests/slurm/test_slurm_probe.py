"""`veri-tui probe --slurm` inside an allocation of the test cluster (`salloc -N 2`, one CPU
rank a node, gloo): the bus bandwidths are printed and cached for the partition, and a plan
for that partition's nodes uses them; a node made slow on purpose (VERI_PROBE_DELAY) is
named with the way out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _in_allocation(cluster: SlurmCluster, home: Path, *args: str, **env: str
                   ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`salloc -N 2 -p debug veri-tui ARGS`: the command runs here, inside the allocation."""
    full = {**os.environ, **cluster.env, "VERI_HOME": str(home), **env}
    start = time.monotonic()
    argv = ["salloc", "--nodes=2", "--partition=debug", "--job-name=veri-probe-test",
            sys.executable, "-m", "veri_tui", *args]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=full, timeout=500,
                         check=False, stdin=subprocess.DEVNULL)  # fmt: skip
    print(out.stdout, out.stderr, f"salloc + probe: {time.monotonic() - start:.1f} s", sep="\n")
    return out


def test_probe_inside_an_allocation_and_the_plan_uses_it(slurm: SlurmCluster, tmp_path) -> None:
    home = tmp_path / "veri"
    out = _in_allocation(slurm, home, "probe", "--slurm")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "bus bandwidth, GB/s (gloo on cpu, 2 node(s) x 1 rank(s)" in out.stdout
    assert re.search(r"all 2 ranks\s+reduce_scatter\s+256 KiB \d", out.stdout)
    assert re.search(r"network: [\d.]+ Gb/s per node across", out.stdout)
    saved = re.search(r"^saved: (\S+) \(plans on debug use it\)$", out.stdout, re.M)
    gbps = json.loads(Path(saved.group(1)).read_text())["internode_gbps"]
    env = {**os.environ, **slurm.env, "VERI_HOME": str(home)}
    plan = subprocess.run(
        [sys.executable, "-m", "veri_tui", "plan", "--slurm", "local", "--partition", "debug",
         "--nodes", "2"], capture_output=True, text=True, env=env, timeout=200, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    line = next(
        (ln for ln in plan.stdout.splitlines() if ln.startswith("nodes: 2 x ")), plan.stdout
    )
    assert f", {round(gbps, 3):g} Gb/s per node across (measured by veri-tui probe, " in line


def test_a_slow_node_of_the_allocation_is_named(slurm: SlurmCluster, tmp_path) -> None:
    out = _in_allocation(slurm, tmp_path / "veri", "probe", "--slurm", VERI_PROBE_DELAY="1:0.1")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    refused = [ln for ln in out.stderr.splitlines() if ln.startswith("error: hosts:")]
    assert len(refused) == 1 and refused[0].startswith(
        "error: hosts: node 1 (127.0.0.2) is slow: the others waited "
    ), out.stderr
    assert "allocate without it: salloc/sbatch --exclude=127.0.0.2" in refused[0]
