"""Helpers shared by the SSH test modules: the CLI in a fresh process, and a remote python
that sees CUDA GPUs.

A fresh process is what a user runs: it reads VERI_HOME, VERI_SSH_CONFIG, VERI_REMOTE_HOME and
VERI_REMOTE_PYTHON from the environment the `ssh_env` fixture set, and keeps no state between
commands, so `jobs`, `logs` and `cancel` are shown to work from the job folders alone.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """`veri-tui ARGS` in a new interpreter; ``env`` replaces the environment when given."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


# CUDA is the one thing mocked (this machine has none): a sitecustomize that makes torch.cuda
# report two 80 GB boards (81559 MiB, as nvidia-smi shows an H100 80GB HBM3).
FAKE_CUDA = """\
import torch
MIB = 81559
class _Props:
    total_memory = MIB * 2**20
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2
torch.cuda.get_device_name = lambda i=0: "NVIDIA H100 80GB HBM3"
torch.cuda.get_device_properties = lambda i=0: _Props()
"""


def script(path: Path, text: str) -> str:
    """An executable file with `text`; returns its path."""
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def fake_gpu_pythons(folder: Path) -> tuple[str, str]:
    """Two wrappers of this interpreter with a fake `nvidia-smi` on PATH: the first also
    loads FAKE_CUDA (torch sees the two boards), the second does not (a CPU build of torch
    on a GPU machine). Use one as VERI_REMOTE_PYTHON."""
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAKE_CUDA)
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    script(bin_dir / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 81559'\n")
    text = (
        f"#!/bin/sh\nPYTHONPATH='{site}' PATH='{bin_dir}':\"$PATH\" "
        f"exec '{sys.executable}' \"$@\"\n"
    )
    cuda = script(folder / "python-cuda", text)
    smi_only = script(folder / "python-smi", text.replace(f"PYTHONPATH='{site}' ", ""))
    return cuda, smi_only
