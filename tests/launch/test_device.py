"""Issue 35: launch says where the ranks will run, on this machine (veri_tui/launch/device.py).

This machine has no NVIDIA GPU: a job planned for 2 x H100-80GB runs 2 CPU processes, said in
one warning row (and line: test_end_to_end.py's first run prints it). With NVIDIA GPUs that
torch cannot use (a CPU build of torch; the driver's tool faked by a script that lists two
H100s, torch itself real) the launch is refused with the fix, before anything is made. Over
SSH and on Slurm: tests/ssh/test_ssh_preflight.py, tests/slurm/test_slurm_launch.py; the
app's row: tests/app/test_app_flow.py.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.launch import jobs
from veri_tui.plan import load_job_config

NVIDIA_SMI = """#!/bin/sh
# The driver's tool on a machine with two H100s (`-L`, or the name and memory query).
case "$*" in
  *-L*) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
        echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)";;
  *) echo "NVIDIA H100 80GB HBM3, 81559"; echo "NVIDIA H100 80GB HBM3, 81559";;
esac
"""


def test_planned_gpus_but_none_here_is_one_warning_row(home: Path) -> None:
    job = load_job_config(None, gpu="H100-80GB", gpu_count=2)
    rows = jobs.preflight(job, None)
    [device] = [r for r in rows if r[0] == "device"]
    assert device == ("device", True, (
        "warning: no CUDA GPU on this machine: the job runs 2 CPU processes (gloo) instead of "
        "the planned 2 x H100-80GB; the plan's memory, speed and cost figures are for those GPUs"
    ))  # fmt: skip
    assert rows[1] == device  # said right after the plan
    assert jobs.row_text(device).startswith("WARN device: no CUDA GPU on this machine: ")
    assert all(ok for _, ok, _ in rows)  # it runs: a warning, not a refusal


def test_nvidia_gpus_torch_cannot_use_are_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    torch = importlib.metadata.version("torch")  # this machine's: the CPU build
    assert main(["launch", "--gpu", "H100-80GB", "--gpu-count", "2"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: torch: this machine has 2 NVIDIA GPUs (nvidia-smi -L) but torch "
        f"{torch} cannot use CUDA (a CPU build: torch.version.cuda is None); the job "
        "would run on CPU while they idle: install a CUDA build of torch (pip install torch "
        "--index-url https://download.pytorch.org/whl/cu128)"
    )
    assert not (home / "jobs").exists()
