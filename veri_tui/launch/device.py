"""Where the job's ranks will run, said before the launch: CUDA GPUs, or CPU processes.

From each node's probe (`HostFacts`): the CUDA GPUs torch sees there (this machine: asked
only when it has NVIDIA devices, `local_cuda`; an SSH host: its probe script; a Slurm
partition: its GPUs per node, `HostFacts.node_gpus`). One preflight row per node
(launching.py `device_rows`), which `launch` also prints (`say`) and the app shows:

- GPUs: `device: 2 CUDA GPUs on this machine (NVIDIA H100 80GB HBM3, 85.5 GB) for the plan's
  2 x H100-80GB`, and a warning when they hold less memory than the planned GPU;
- none: `warning: no CUDA GPU on this machine: the job runs 2 CPU processes (gloo) instead of
  the planned 2 x H100-80GB; ...` (the job runs, slowly; the plan's figures are the GPUs').

A machine whose NVIDIA GPUs torch cannot use (a CPU build of torch beside nvidia-smi or
/dev/nvidia*) is refused with the fix (`cuda_problem`), here as over SSH
(ssh/preflight.py): that job would leave paid GPUs idle for hours.
"""

from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal

if TYPE_CHECKING:
    from veri_tui.launch.host import HostFacts, Row

WARNING = "warning: "
CUDA_BUILD = "pip install torch --index-url https://download.pytorch.org/whl/cu128"
# torch's own view of CUDA, in a child process (the app and the launcher never import torch).
TORCH_PROBE = r"""
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps({"torch": torch.__version__, "cuda_build": torch.version.cuda,
                  "cuda": [{"name": torch.cuda.get_device_name(i),
                            "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                           for i in range(n)]}))
"""


def nvidia_devices() -> tuple[int, str] | None:
    """NVIDIA GPUs this machine has, whatever torch sees: (count, how it was told), or None."""
    if shutil.which("nvidia-smi") is not None:
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                 timeout=15, check=False).stdout  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        listed = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        if listed:
            return listed, "nvidia-smi -L"
    nodes = glob.glob("/dev/nvidia[0-9]*")
    return (len(nodes), "/dev/nvidia*") if nodes else None


def local_cuda() -> tuple[list[dict[str, Any]], Refusal | None]:
    """This machine's CUDA GPUs as torch sees them ([] without NVIDIA devices: torch is not
    even imported), and the refusal of NVIDIA devices torch cannot use."""
    found = nvidia_devices()
    if found is None:
        return [], None
    res = subprocess.run([sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    try:
        facts: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [], None  # no torch here: the torch row says so
    return facts["cuda"], cuda_problem(facts, found, "this machine", "")


def cuda_problem(facts: dict[str, Any], found: tuple[int, str], where: str, there: str
                 ) -> Refusal | None:  # fmt: skip
    """NVIDIA GPUs (``found``: count, how) that torch (``facts``: its version, CUDA build and
    GPUs) cannot use, as one refusal with the fix; None when it sees them."""
    if facts.get("cuda"):
        return None
    build = facts.get("cuda_build")
    why = (
        "a CPU build: torch.version.cuda is None"
        if not build
        else (f"built for CUDA {build}, but torch.cuda.is_available() is False: check the driver")
    )
    gpus, idle = ("GPUs", "they idle") if found[0] != 1 else ("GPU", "it idles")
    return Refusal("torch", (
        f"{where} has {found[0]} NVIDIA {gpus} ({found[1]}) but torch {facts.get('torch')} "
        f"cannot use CUDA ({why}); the job would run on CPU while {idle}: install a CUDA "
        f"build of torch{there} ({CUDA_BUILD})"
    ))  # fmt: skip


def device_row(facts: HostFacts, plan_job: dict[str, Any], where: str, label: str = ""
               ) -> Row:  # fmt: skip
    """Where one node's ranks run against the plan's GPU (``plan_job``: the plan record's
    `job`); `warning: ` starts the detail of a job that runs elsewhere than planned."""
    from veri_tui.plan.gpus import get_gpu

    gpu, count = str(plan_job["gpu"]), int(plan_job["gpu_count"])
    where = facts.ranks_on or where
    have = len(facts.gpus) if facts.node_gpus is None else facts.node_gpus
    check = f"{label} device" if label else "device"
    if not have:
        ranks = f"{count} CPU process{'es' * (count != 1)} (gloo)"
        return (check, True, f"{WARNING}no CUDA GPU on {where}: the job runs {ranks} instead "
                             f"of the planned {count} x {gpu}; the plan's memory, speed and "
                             "cost figures are for those GPUs")  # fmt: skip
    shown = f"{have} CUDA GPU{'s' * (have != 1)} on {where}"
    if facts.gpus:
        smallest = min(g["memory_bytes"] for g in facts.gpus)
        names = sorted({g["name"] for g in facts.gpus})
        shown += f" ({', '.join(names)}, {smallest / 1e9:.1f} GB)"
        planned = get_gpu(gpu).memory_bytes
        if smallest < 0.97 * planned:
            return (check, True, f"{WARNING}{shown}, smaller than the planned {gpu} "
                                 f"({planned / 1e9:.1f} GB): plan for them with --gpu "
                                 f"custom-{smallest / 1e9:.1f}GB")  # fmt: skip
    return (check, True, f"{shown} for the plan's {count} x {gpu}")


def device_line(row: Row) -> str:
    """The row as `launch` prints it: `device: ...`, or `warning: ...`."""
    check, _, detail = row
    return detail if detail.startswith(WARNING) else f"{check}: {detail}"
