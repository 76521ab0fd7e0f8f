"""A fake nvidia-ml-py (`pynvml`) for the probe's GPU health tests: the GPU is the one thing
mocked, and every call is one pynvml names (veri_tui/trainer/gpuhealth.py makes them).

`fake_pynvml(count, pending)` is the module's source: ``count`` H100s, driver 550.54.15,
CUDA 12.4, and a row remapping pending on GPU ``pending`` (sick: veri_tui/trainer/gpuhealth.py reads
it, veri_tui/jobfolder/probe/probe_health.py judges it); `python_with_fake_nvml` an interpreter that
imports it, for a host to run the probe with.
"""

from __future__ import annotations

import sys
from pathlib import Path

TEMPLATE = """
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlSystemGetCudaDriverVersion(): return 12040
def nvmlDeviceGetCount(): return {count}
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return b"NVIDIA H100 80GB HBM3"
def nvmlDeviceGetTotalEccErrors(h, kind, counter): return 0
def nvmlDeviceGetRemappedRows(h): return (0, 1, 1, 0) if h == {pending} else (0, 0, 0, 0)
def nvmlDeviceGetCurrPcieLinkWidth(h): return 16
def nvmlDeviceGetMaxPcieLinkWidth(h): return 16
"""


def fake_pynvml(count: int, pending: int) -> str:
    """The fake module's source (above)."""
    return TEMPLATE.format(count=count, pending=pending)


def write_fake_pynvml(folder: Path, count: int, pending: int) -> Path:
    """`<folder>/pynvml.py`; put ``folder`` first on PYTHONPATH to import it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pynvml.py"
    path.write_text(fake_pynvml(count, pending))
    return path


def python_with_fake_nvml(folder: Path, count: int, pending: int, when: str | None = None) -> str:
    """A wrapper of this interpreter that imports the fake pynvml first (written under
    ``folder``): always, or only where the environment variable ``when`` is set (an sshd's
    SetEnv marks the one node that has the fake GPUs). Use it as a host's Python."""
    fake = write_fake_pynvml(folder / "fake", count, pending).parent
    export = f'export PYTHONPATH="{fake}${{PYTHONPATH:+:$PYTHONPATH}}"'
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/bash\n"
        + (f'[ -n "${when}" ] && {export}\n' if when else f"{export}\n")
        + f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)
