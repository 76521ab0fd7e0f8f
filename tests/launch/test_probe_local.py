"""The launch's probe on one machine with 2 GPUs or more: their health and the bandwidth among
them before the job (veri_tui/launch/probe/fleet.py `needs_probe`, `fleet_probe`).

The GPUs are the one thing mocked: the host's facts name two H100s (what torch.cuda would
report) and the host's Python finds a fake nvidia-ml-py whose GPU 1 has a row remapping
pending. The bandwidth run is real: torchrun with 2 CPU ranks (gloo) on this machine. The sick
GPU is refused by name with the way out for one machine; --allow-slow-nodes goes on, and the
verdict is cached for the launch after it.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.fakenvml import python_with_fake_nvml

from veri_tui.errors import VeriError
from veri_tui.launch.backends import backend_of
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.probe.fleet import ProbeChoice, fleet_probe, needs_probe
from veri_tui.launch.probe.report import cached, hosts_key
from veri_tui.plan import load_job_config

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 10**9}


def host(kind: str) -> SimpleNamespace:
    return SimpleNamespace(kind=kind)


def probe_first(hosts: list[SimpleNamespace], facts: list[SimpleNamespace], job: object) -> bool:
    """needs_probe with the backend of the first host's kind, as a launch passes it."""
    return needs_probe(hosts, facts, job, backend_of(hosts[0].kind))  # type: ignore[arg-type]


def test_which_launches_probe_first() -> None:
    two, none = SimpleNamespace(gpus=[H100, H100]), SimpleNamespace(gpus=[])
    job2, job1 = SimpleNamespace(gpu_count=2), SimpleNamespace(gpu_count=1)
    assert probe_first([host("ssh"), host("ssh")], [none, none], job2)  # several nodes
    assert probe_first([host("local")], [two], job2)  # 2 GPUs of this machine
    assert probe_first([host("ssh")], [two], job2)  # of one SSH host
    assert not probe_first([host("local")], [two], job1)  # one GPU: nothing among them
    assert not probe_first([host("local")], [none], job2)  # CPU ranks
    assert not probe_first([host("slurm")], [two], job2)  # nodes unknown before allocation


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_sick_gpu_of_this_machine_refuses_the_launch_by_name(home: Path, tmp_path: Path) -> None:
    python = python_with_fake_nvml(tmp_path, count=2, pending=1)  # GPU 1: remapping pending
    job = load_job_config(None, gpu_count=2)
    local = LocalHost()
    local.machine.python = python
    facts = local.probe(job, 0)
    facts.gpus = [H100, H100]  # what torch.cuda would say on that machine
    assert needs_probe([local], [facts], job, backend_of("local"))
    start = time.monotonic()
    with pytest.raises(VeriError) as refused:
        fleet_probe([local], [facts], job, ProbeChoice())
    print(f"one machine, 2 ranks: refused after {time.monotonic() - start:.1f} s")
    messages = [e.message for e in refused.value.errors]
    assert messages == [
        "node 0 (this machine) is sick: GPU 1: a row remapping is pending (reset the GPU to "
        "apply it); leave it out (list only the other GPUs in CUDA_VISIBLE_DEVICES, with a "
        "lower --gpu-count) or pass --allow-slow-nodes to go on at your own risk"
    ]
    # Measured and cached: the launch after it (or --allow-slow-nodes) reads the same verdict.
    data = cached(hosts_key(["local"]))
    assert data is not None and data["bandwidth"]["ranks_per_node"] == 2
    assert data["sick"] == [
        "node 0 (this machine): GPU 1: a row remapping is pending (reset the GPU to apply it)"
    ]
    report = fleet_probe([local], [facts], job, ProbeChoice(allow_slow=True))
    assert report is not None and report.measured_at == data["measured_at"]  # the cached one
    lines = report.lines()
    assert lines[-1].startswith("gpu health: this machine: SICK: 2 GPUs, driver 550.54.15")
    assert any("all 2 ranks" in ln and "all_reduce" in ln for ln in lines), lines
    assert any(ln.startswith("within a node: all_reduce busbw ") for ln in lines), lines
