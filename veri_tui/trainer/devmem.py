"""A rank's peak memory, every figure the device gives, each named by its source.

- allocated: `torch.cuda.max_memory_allocated` (the tensors; what the plan's terms add up to),
  across the metric lines' window resets (veri_tui/trainer/peakmem.py);
- reserved: `torch.cuda.max_memory_reserved` (the caching allocator's segments: allocated plus
  fragmentation and cached blocks; what an out-of-memory is judged against);
- alloc_retries: `memory_stats()["num_alloc_retries"]`, how often the allocator had to free
  its cache and retry (a sign the GPU ran near full even when the peaks look fine);
- device memory: what the driver says this process holds (allocator segments plus the CUDA
  context, cuBLAS and NCCL buffers: the plan's 2 GiB "overhead" term), from NVML (the
  nvidia-ml-py package, imported as pynvml, if importable) else `nvidia-smi`. NVML has no peak
  counter, so it is sampled after optimizer steps (when the allocator's reserve is at its
  high-water mark; cached blocks are not given back) and the largest sample kept. Not
  available: recorded as None with the reason in `device_memory_source`, never estimated;
- host: VmHWM, the process's resident peak, on CPU (where it is `peak_bytes`) and on CUDA
  (cpu_offload's host-side states live there);
- the allocator's settings as the allocator itself holds them (`allocator_settings`), not as
  the environment asked: `expandable_segments` and the settings string it parsed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

import torch

from veri_tui.trainer.peakmem import run_peaks

SAMPLE_EVERY_S = 1.0  # NVML: an init, a query and a shutdown per sample
SMI_EVERY_S = 10.0  # nvidia-smi is a process start: sampled at most this often


def vm_hwm_bytes() -> int | None:
    """This process's peak resident set (VmHWM) in bytes; None where /proc has no status."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _bus_id(device: torch.device) -> str | None:
    """The GPU's PCI bus id as NVML and nvidia-smi name it (CUDA_VISIBLE_DEVICES-proof)."""
    props = torch.cuda.get_device_properties(device)
    dom, bus, dev = (getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id",
                                                        "pci_device_id"))  # fmt: skip
    if bus is None or dev is None:
        return None
    return f"{dom or 0:08x}:{bus:02x}:{dev:02x}.0"


def _nvml(bus: str | None, pid: int) -> tuple[int | None, str]:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    try:
        if bus is not None:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory:
                return int(proc.usedGpuMemory), "nvml (this process)"
        # In a container NVML may not see our pid: the whole GPU (one rank per GPU).
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used), "nvml (whole GPU)"
    finally:
        pynvml.nvmlShutdown()


def _smi(bus: str | None, pid: int) -> tuple[int | None, str]:
    """nvidia-smi's compute apps (MiB), this pid's line; else the GPU's memory.used."""
    mib = 1 << 20
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id,used_memory",
         "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=10, check=False,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0] == str(pid) and cells[2].isdigit():
            return int(cells[2]) * mib, "nvidia-smi (this process)"
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    if bus is not None:
        query += ["-i", bus]
    first = subprocess.run(query, capture_output=True, text=True, timeout=10, check=False)
    value = (first.stdout.strip().splitlines() or [""])[0].strip()
    if value.isdigit():
        return int(value) * mib, "nvidia-smi (whole GPU)"
    return None, "not measured (nvidia-smi gave no figure)"


def device_memory_now(device: torch.device) -> tuple[int | None, str]:
    """(bytes the driver says this rank's GPU holds, the source); None off CUDA or without
    NVML and nvidia-smi."""
    if device.type != "cuda":
        return None, f"not measured ({device.type}: no GPU)"
    try:
        bus = _bus_id(device)
    except Exception:  # noqa: BLE001 - no properties: NVML's first GPU, nvidia-smi's all
        bus = None
    pid = os.getpid()
    try:
        return _nvml(bus, pid)
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - an NVML error must never end the run
        if shutil.which("nvidia-smi") is None:
            return None, f"not measured (NVML: {type(exc).__name__})"
    if shutil.which("nvidia-smi") is None:
        return None, "not measured (no pynvml, no nvidia-smi)"
    try:
        return _smi(bus, pid)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"not measured (nvidia-smi: {type(exc).__name__})"


class DeviceMemory:
    """The largest device-memory sample so far (NVML has no peak counter): at most one
    sample a second (NVML), or every SMI_EVERY_S seconds (nvidia-smi), unless forced."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak: int | None = None
        self.source = "not measured (no sample yet)"
        self._last: float | None = None

    def sample(self, force: bool = False) -> None:
        """Take a sample when due (never raises)."""
        if self.device.type != "cuda":
            return
        every = SMI_EVERY_S if self.source.startswith("nvidia-smi") else SAMPLE_EVERY_S
        now = time.monotonic()
        if not force and self._last is not None and now - self._last < every:
            return
        self._last = now
        value, source = device_memory_now(self.device)
        if value is None:
            if self.peak is None:
                self.source = source
            return
        self.peak, self.source = max(self.peak or 0, value), source


def peak_memory(device: torch.device, sampler: DeviceMemory | None = None) -> dict[str, Any]:
    """The rank's peaks so far, each with its source (module docstring)."""
    host = vm_hwm_bytes()
    if device.type != "cuda":
        return {"peak_bytes": host, "peak_source": "VmHWM", "host_rss_peak_bytes": host,
                "device_memory_bytes": None,
                "device_memory_source": f"not measured ({device.type}: no GPU)"}  # fmt: skip
    alloc, reserved = run_peaks(device)  # across the metric lines' window resets
    stats = torch.cuda.memory_stats(device)
    if sampler is not None:
        sampler.sample(force=True)
    return {
        "peak_bytes": alloc, "peak_reserved_bytes": reserved,
        "peak_source": "cuda_max_allocated",
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "cuda_ooms": int(stats.get("num_ooms", 0)),
        "device_memory_bytes": sampler.peak if sampler else None,
        "device_memory_source": sampler.source if sampler else "not measured (not sampled)",
        "host_rss_peak_bytes": host,
        **allocator_settings(),
    }  # fmt: skip


def allocator_settings() -> dict[str, Any]:
    """What the CUDA caching allocator runs with, read from the allocator: {"alloc_conf" (the
    settings string it parsed), "expandable_segments" (bool, None when unknown),
    "allocator_source"}.

    torch.cuda.memory._snapshot()'s `allocator_settings` first (the allocator's parsed
    config, c10's AllocatorConfigInfo: `expandable_segments` and `last_allocator_settings`, in
    torch 2.11 and 2.13): it says whether expandable segments are on, whatever the variable
    said (a name the allocator does not know, a setting made after CUDA started). Else the
    device-generic config string (`torch._C._accelerator_getAllocatorSettings`: 2.13 has it,
    2.11 not), with expandable_segments read from it. Read at each record (milliseconds)."""
    out: dict[str, Any] = {"alloc_conf": None, "expandable_segments": None}
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings") or {}
    except Exception as exc:  # noqa: BLE001 - a figure never ends the run
        settings, why = {}, f"{type(exc).__name__}"
    else:
        why = "no allocator_settings in the snapshot"
    if "expandable_segments" in settings:
        out.update(
            alloc_conf=settings.get("PYTORCH_CUDA_ALLOC_CONF") or None,
            expandable_segments=bool(settings["expandable_segments"]),
            allocator_source="torch.cuda.memory._snapshot()",
        )
    else:
        get = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
        try:
            text = get() if get is not None else None
        except Exception:  # noqa: BLE001
            text = None
        if text is None:
            out["allocator_source"] = f"not available (snapshot: {why}; no settings string)"
        else:
            pairs = dict(p.split(":", 1) for p in text.replace(" ", "").split(",") if ":" in p)
            flag = pairs.get("expandable_segments", "False")
            out.update(
                alloc_conf=text or None,
                expandable_segments=flag.lower() == "true",
                allocator_source="torch._C._accelerator_getAllocatorSettings()",
            )
    return out
