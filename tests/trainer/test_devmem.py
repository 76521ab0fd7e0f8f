"""Every peak figure a rank records, each from its own source (veri_tui/trainer/devmem.py).

On CPU: the real VmHWM, and the device figure recorded as not measured (never invented). On
CUDA (mocked: the torch.cuda counters and the driver's answers, NVML through a stand-in
pynvml module, nvidia-smi through a script on PATH): allocated, reserved, allocator retries,
the driver's device memory, and all of it in job.json's `measured` and `veri-tui jobs JOB`.
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch

from veri_tui.jobfolder.supervise.jobstats import gather
from veri_tui.launch.measured import comparison, comparison_lines
from veri_tui.trainer import devmem
from veri_tui.trainer.report import RankContext
from veri_tui.trainer.runstats import RunStats

CUDA = torch.device("cuda", 0)
GIB = 1 << 30


def test_cpu_records_rss_and_no_device_figure(tmp_path: Path) -> None:
    got = RunStats(RankContext(0, 0, 0, 1, tmp_path), torch.device("cpu"), 0).record(True)
    assert got["peak_source"] == "VmHWM" and got["peak_bytes"] > 10**7
    assert got["host_rss_peak_bytes"] == got["peak_bytes"] or got["host_rss_peak_bytes"] > 0
    assert got["device_memory_bytes"] is None
    assert got["device_memory_source"] == "not measured (cpu: no GPU)"
    assert "peak_reserved_bytes" not in got and "alloc_retries" not in got


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda's counters as a GPU rank would see them."""
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 30 * GIB)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: 34 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda d=None: {"num_alloc_retries": 3})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H200")
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: props)
    # The allocator's own settings (what torch.cuda.memory._snapshot() reports on a GPU); the
    # environment says otherwise, and is not what is recorded.
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                "expandable_segments": True}  # fmt: skip
    snapshot = {"segments": [], "allocator_settings": settings}
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda d=None: snapshot)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, used: list[int], see_pid: bool = True) -> list:
    asked: list[str] = []
    nv = types.ModuleType("pynvml")
    nv.nvmlInit = nv.nvmlShutdown = lambda: None

    def handle(bus: str) -> str:
        asked.append(bus)
        return "h"

    def procs(_h: str) -> list:
        pid = os.getpid() if see_pid else 1
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used.pop(0))]

    nv.nvmlDeviceGetHandleByPciBusId = handle
    nv.nvmlDeviceGetComputeRunningProcesses = procs
    nv.nvmlDeviceGetMemoryInfo = lambda _h: types.SimpleNamespace(used=80 * GIB)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return asked


def test_cuda_records_allocated_reserved_retries_and_nvml(
    tmp_path: Path, cuda: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _fake_nvml(monkeypatch, used=[35 * GIB, 37 * GIB, 36 * GIB])
    stats = RunStats(RankContext(0, 0, 0, 1, tmp_path), CUDA, zero_stage=0)
    stats.step_done(1000.0, 1.0)  # first sample (and the file written after step 1)
    stats.step_done(1000.0, 1.0)  # within a second: not sampled again
    got = stats.write()
    assert (got["peak_bytes"], got["peak_reserved_bytes"]) == (30 * GIB, 34 * GIB)
    assert got["alloc_retries"] == 3 and got["alloc_conf"] == "expandable_segments:True"
    assert got["expandable_segments"] is True
    assert got["allocator_source"] == "torch.cuda.memory._snapshot()"
    # The largest sample (37 GiB at the final forced read), this process's own line.
    assert got["device_memory_bytes"] == 37 * GIB
    assert got["device_memory_source"] == "nvml (this process)"
    assert set(asked) == {"00000000:1b:00.0"}  # the GPU by its bus id (CUDA_VISIBLE_DEVICES)
    meas = gather(tmp_path, {"gpu": "H200-141GB"})
    assert meas is not None and meas["device_memory_bytes"] == 37 * GIB
    assert meas["peak_per_rank"][0]["peak_reserved_bytes"] == 34 * GIB
    assert meas["expandable_segments"] is True
    pred = {"gpu": "H200-141GB", "peak_bytes": 28e9, "allocated_bytes": 32e9,
            "device_peak_bytes": 32e9 + 2 * GIB}  # fmt: skip
    rows = {r[0]: r[1:] for r in comparison({"predicted": pred, "measured": meas})}
    assert rows["allocated/GPU (with step)"] == ("32.00 GB", "32.21 GB", "1.01x")
    assert rows["reserved/GPU"][1] == "36.51 GB"
    assert rows["device memory/GPU"][:2] == ("34.15 GB", "39.73 GB")
    assert rows["allocator retries"] == ("-", "3", "-")


def test_without_nvml_nvidia_smi_answers_else_not_measured(
    tmp_path: Path, cuda: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: the import fails
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    value, source = devmem.device_memory_now(CUDA)
    assert (value, source) == (None, "not measured (no pynvml, no nvidia-smi)")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{os.getpid()}, 00000000:1B:00.0, 20480'\n")
    smi.chmod(0o755)
    assert devmem.device_memory_now(CUDA) == (20 * GIB, "nvidia-smi (this process)")
    meas_line = comparison_lines({"predicted": {}, "measured": {
        "device": "cuda", "ranks": 1, "device_memory_bytes": None, "alloc_retries": 0,
        "device_memory_source": "not measured (no pynvml, no nvidia-smi)"}})  # fmt: skip
    assert meas_line[-1] == "device memory: not measured (no pynvml, no nvidia-smi)"


def test_nvml_blind_to_our_pid_reads_the_whole_gpu(cuda: None, monkeypatch) -> None:
    _fake_nvml(monkeypatch, used=[5 * GIB], see_pid=False)  # a container's pid namespace
    assert devmem.device_memory_now(CUDA) == (80 * GIB, "nvml (whole GPU)")


def test_without_a_snapshot_the_allocators_settings_string_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No snapshot (fake CUDA, an older torch): the string the allocator parsed, from the
    device-generic config (torch 2.13 here: what PYTORCH_CUDA_ALLOC_CONF gave it)."""

    def no_snapshot(d: object = None) -> dict:
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", no_snapshot)
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings",
                        lambda: "max_split_size_mb:64,expandable_segments:True")  # fmt: skip
    got = devmem.allocator_settings()
    assert got == {"alloc_conf": "max_split_size_mb:64,expandable_segments:True",
                   "expandable_segments": True,
                   "allocator_source": "torch._C._accelerator_getAllocatorSettings()"}  # fmt: skip
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", lambda: "")
    assert devmem.allocator_settings()["expandable_segments"] is False
