"""Which GPU the check runs on, and so which prepared plan it is judged against.

The prepared folder holds one plan per GPU a device machine may be (gpu_check_prepare.GPUS:
H100-80GB and H200-141GB), since re-planning needs the planning core (pydantic), which the
GPU machine lacks. At run time a child process asks CUDA for the device's name and memory
(this process never touches CUDA), and `choose` picks the prepared GPU whose catalog family
(the name before the size: H100, H200) the device's name carries, the closest in memory when
several do: "NVIDIA H100 80GB HBM3" (81,559 MiB) is H100-80GB, "NVIDIA H200" (143,771 MiB)
H200-141GB. A device none matches is judged against the first prepared plan, and the table
says so. Stdlib only.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

#: The child's question to CUDA: name, memory and torch's version, as one JSON line.
ASK = (
    "import json, torch\n"
    "p = torch.cuda.get_device_properties(0)\n"
    "print(json.dumps({'name': torch.cuda.get_device_name(0), 'memory_bytes': p.total_memory,"
    " 'torch': torch.__version__, 'count': torch.cuda.device_count()}))\n"
)


def detect(device: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> dict:
    """{"name", "memory_bytes", "torch", "count"} of CUDA device 0 (a child process), or
    {"name": "cpu"} for a CPU check; {"name": None, "error": why} when CUDA did not answer."""
    if device == "cpu":
        return {"name": "cpu", "memory_bytes": None}
    try:
        proc = subprocess.run([sys.executable, "-c", ASK], capture_output=True, text=True,
                              timeout=timeout, env=env)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"name": None, "error": f"{type(exc).__name__}"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"name": None, "error": last}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _family_and_size(gpu: str) -> tuple[str, float]:
    """("H100", 80e9) of the catalog name "H100-80GB"."""
    m = re.fullmatch(r"(.+?)-(\d+)GB", gpu)
    return (m.group(1), float(m.group(2)) * 1e9) if m else (gpu, 0.0)


def choose(found: dict[str, Any], prepared: list[str]) -> tuple[str, str]:
    """(the prepared GPU to judge against, one line saying why) for the device `found`."""
    name = str(found.get("name") or "")
    if name == "cpu" or len(prepared) == 1 and not name:
        return prepared[0], f"planned for {prepared[0]}"
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    matches = [g for g in prepared if _family_and_size(g)[0].lower() in words]
    if not matches:
        why = found.get("error") or f"no prepared plan is for {name!r}"
        return prepared[0], (
            f"judged against {prepared[0]}'s plan: {why} (prepared for {', '.join(prepared)})"
        )
    memory = float(found.get("memory_bytes") or 0)
    best = min(matches, key=lambda g: abs(_family_and_size(g)[1] - memory))
    return best, f"{name} ({memory / 2**30:.0f} GiB): {best}'s plan"
