"""`veri-tui probe --host n0 --host n1` over two real sshd servers, one CPU rank a node
(gloo): it prints the bus bandwidths, caches the network it measured, and `veri-tui plan` on
the same hosts plans with it; a node made slow on purpose (VERI_PROBE_DELAY: its rank
sleeps before every collective) and sick (a fake nvidia-ml-py on its path: a pending row
remapping) is named, refused by the probe and by a launch, with the way out (leave it out,
or --allow-slow-nodes).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from multinode_helpers import two_node_env
from ssh_helpers import cli
from support.fakenvml import python_with_fake_nvml

from veri_tui.launch import jobs
from veri_tui.plan import load_job_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def probed(sshd, sshd2, tmp_path_factory):
    """One healthy probe of both hosts: (env, its output)."""
    env = two_node_env(sshd, sshd2, tmp_path_factory.mktemp("probe"), probe=True)
    start = time.monotonic()
    out = cli("probe", "--host", sshd.alias, "--host", sshd2.alias, env=env, timeout=400)
    print(out.stdout, f"probe of 2 hosts: {time.monotonic() - start:.1f} s", sep="\n")
    return env, out


def test_probe_prints_bus_bandwidths_and_the_plan_uses_them(
    probed, sshd, sshd2, monkeypatch
) -> None:
    env, out = probed
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert "bus bandwidth, GB/s (gloo on cpu, 2 node(s) x 1 rank(s)" in text
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        assert re.search(rf"all 2 ranks\s+{kind}\s+256 KiB \d+\.\d+ +1 MiB \d+\.\d+ +4 MiB", text)
    gbps = float(re.search(r"network: ([\d.]+) Gb/s per node across the nodes", text).group(1))
    assert gbps > 0
    # No NVML on this machine: said once, not per node.
    assert text.count("gpu health:") == 1 and "no NVIDIA GPU here" in text
    saved = re.search(r"^saved: (\S+) \(plans on (\S+) use it\)$", text, re.M)
    assert saved.group(2) == f"{sshd.alias},{sshd2.alias}"
    report = json.loads(Path(saved.group(1)).read_text())
    assert report["slow"] == [] and report["sick"] == []
    assert report["internode_gbps"] == pytest.approx(gbps, abs=0.01)
    plan = cli("plan", "--host", sshd.alias, "--host", sshd2.alias, "--set", "zero_stage=3",
               "--set", "gpu_count=2", env=env, timeout=200)  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    print(next(ln for ln in plan.stdout.splitlines() if ln.startswith("nodes:")))
    measured = round(report["internode_gbps"], 3)
    assert f"{measured:g} Gb/s per node across (measured by veri-tui probe, " in plan.stdout
    # The launch's preflight (the app's launch screen) shows the probe it would use: the one
    # just cached, not measured again.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rows = jobs.preflight(load_job_config(None), None, [sshd.alias, sshd2.alias])
    assert (
        "probe",
        True,
        next(ln for ln in text.splitlines() if ln.startswith("network:")),
    ) in rows
    # Other hosts have no probe: the assumption stays.
    other = cli("plan", "--host", sshd2.alias, "--host", sshd.alias, env=env, timeout=200)
    assert "25 Gb/s per node across (ethernet default)" in other.stdout, other.stderr


# What node 1 imports as nvidia-ml-py (its sshd sets VERI_FAKE_NVML): one H100 whose row
# remapping is pending (tests/support/fakenvml.py).


@pytest.fixture(scope="module")
def sick_sshd(tmp_path_factory):
    """A node whose sessions see VERI_FAKE_NVML=1 (sshd's SetEnv)."""
    from ssh.conftest import _serve

    yield from _serve(tmp_path_factory, "veri-test-sick", "SetEnv VERI_FAKE_NVML=1\n")


def test_a_slow_or_sick_node_is_named_and_refused(sshd, sick_sshd, tmp_path) -> None:
    env = two_node_env(sshd, sick_sshd, tmp_path, probe=True)
    env["VERI_REMOTE_PYTHON"] = python_with_fake_nvml(tmp_path, 1, 0, when="VERI_FAKE_NVML")
    env["VERI_PROBE_DELAY"] = "1:0.1"  # node 1's rank sleeps 100 ms before each collective
    hosts = ["--host", sshd.alias, "--host", sick_sshd.alias]
    start = time.monotonic()
    out = cli("probe", *hosts, env=env, timeout=400)
    print(out.stdout, out.stderr, f"named after {time.monotonic() - start:.1f} s", sep="\n")
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error: hosts:")]
    way_out = (
        "; leave it out (drop its --host) or pass --allow-slow-nodes to go on at your own risk"
    )
    node1 = f"error: hosts: node 1 ({sick_sshd.alias}) is"
    assert lines[0] == f"{node1} sick: GPU 0: a row remapping is pending (reset the GPU to " \
        f"apply it){way_out}"  # fmt: skip
    assert lines[1].startswith(f"{node1} slow: the others waited ") and lines[1].endswith(way_out)
    assert lines[2:] == [
        f"error: hosts: the nodes differ in {what} ({sshd.alias}: no GPU, {sick_sshd.alias}: "
        f"{value}); every node must have the same"
        for what, value in (("driver", "550.54.15"), ("CUDA version", "12.4"), ("GPU count", 1))
    ]
    assert f"gpu health: {sick_sshd.alias}: SICK: 1 GPU, driver 550.54.15, CUDA 12.4" in out.stdout
    # A launch on the same hosts is refused by the probe's verdict (cached just now) before
    # anything is created; --allow-slow-nodes is the way on, at the user's risk.
    launch = cli("launch", *hosts, "--set", "max_steps=1", env=env, timeout=400)
    assert launch.returncode == 2 and lines[0] in launch.stderr, launch.stderr
    assert not (tmp_path / "remote-veri" / "jobs").exists() or not any(
        (tmp_path / "remote-veri" / "jobs").iterdir()
    )
