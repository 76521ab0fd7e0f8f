"""Preflight on the test sshd: what it finds, each failure in one line, the plan for the GPU.

CUDA is the one thing mocked (this machine has none): a wrapper interpreter loads a
sitecustomize that makes torch.cuda report two 80 GB boards, and puts a fake nvidia-smi on PATH
(ssh_helpers.fake_gpu_pythons).
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest
from ssh_helpers import fake_gpu_pythons, script

from veri_tui.launch.device import device_row
from veri_tui.launch.ssh import preflight
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.host import SshHost
from veri_tui.launch.ssh.preflight import run_preflight
from veri_tui.plan import load_job_config, read_model_info
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_host_facts_and_remote_parameter_count(ssh_env) -> None:
    conn = Connection.open(ssh_env.alias)
    model = str(bundled_tiny_model())
    pf = run_preflight(conn, model=model, gpu_count=2)
    conn.close()
    assert pf.problems == []
    assert pf.facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert pf.facts["torch"] == importlib.metadata.version("torch")
    assert pf.gpus == [] and pf.gpu_name is None  # CPU host: the job runs CPU processes
    assert pf.model_path == model
    assert pf.model_info.parameter_count == read_model_info(model).parameter_count
    assert pf.facts["disk_free_bytes"] > 0
    assert any(line.startswith("gpus: 0 CUDA") for line in pf.summary())


def test_detected_gpus_drive_the_plan(ssh_env, tmp_path: Path, monkeypatch) -> None:
    wrapper, smi_only = fake_gpu_pythons(tmp_path)
    conn = Connection.open(ssh_env.alias)
    # nvidia-smi sees boards, torch (a CPU build) cannot use them: refused, saying why.
    monkeypatch.setenv("VERI_REMOTE_PYTHON", smi_only)
    pf = run_preflight(conn, model=None, gpu_count=1)
    assert len(pf.problems) == 1 and "cannot use CUDA" in pf.problems[0].message
    assert pf.problems[0].message.startswith("veri-test has 1 NVIDIA GPU (nvidia-smi) but ")
    assert "install a CUDA build of torch there (pip install torch --index-url" in str(
        pf.problems[0]
    )
    monkeypatch.setenv("VERI_REMOTE_PYTHON", wrapper)
    pf = run_preflight(conn, model=None, gpu_count=4)
    conn.close()
    assert [g["name"] for g in pf.gpus] == ["NVIDIA H100 80GB HBM3"] * 2
    assert pf.gpu_name == "custom-85.521GB"  # the real memory, 81559 MiB, to the MB
    assert [e.key for e in pf.problems] == ["gpu_count"]
    assert "4 requested" in pf.problems[0].message and "2 CUDA GPUs" in pf.problems[0].message
    job, plan = SshHost("veri-test").plan(load_job_config(None, gpu="L4-24GB", gpu_count=2), pf)
    assert job.gpu == "custom-85.521GB"
    # Where the ranks run, as the preflight and launch say it (issue 35).
    assert device_row(pf, plan.job, "veri-test") == ("device", True, (
        "2 CUDA GPUs on veri-test (NVIDIA H100 80GB HBM3, 85.5 GB) for the plan's 2 x "
        "custom-85.521GB"
    ))  # fmt: skip
    real_budget = 0.70 * (81559 * 2**20 - 2 * 2**30)
    assert abs(plan.to_dict()["budget_bytes"] - real_budget) < 10**6


def test_each_failure_is_one_line(ssh_env, tmp_path: Path, monkeypatch) -> None:
    conn = Connection.open(ssh_env.alias)
    monkeypatch.setenv("VERI_REMOTE_PYTHON", str(tmp_path / "no such python"))
    with pytest.raises(preflight.VeriError, match="not found on veri-test") as err:
        run_preflight(conn, model=None)
    assert len(err.value.lines()) == 1 and "VERI_REMOTE_PYTHON" in err.value.lines()[0]
    # -S: no site-packages, so neither torch nor the trainer's libraries import.
    bare = script(tmp_path / "bare-python", f"#!/bin/sh\nexec '{sys.executable}' -S \"$@\"\n")
    monkeypatch.setenv("VERI_REMOTE_PYTHON", bare)
    monkeypatch.setattr(preflight, "DISK_MARGIN_BYTES", 2**62)
    pf = run_preflight(conn, model=str(tmp_path / "absent model"), gpu_count=1)
    conn.close()
    lines = [str(e) for e in pf.problems]
    assert len(lines) == 4, lines
    assert "torch is not importable" in lines[0]
    assert "missing on veri-test: transformers peft safetensors" in lines[1]
    assert "absent model not found on veri-test" in lines[2]
    assert "free some space" in lines[3]
    assert all("\n" not in line for line in lines)


def test_facade_preflight_rows_for_a_host(ssh_env, tmp_path: Path) -> None:
    from veri_tui.launch import jobs
    from veri_tui.plan import plan_job

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "old.bin").write_bytes(b"x")
    model = str(bundled_tiny_model())
    job = load_job_config(None, model=model, gpu_count=2, output=str(taken))
    rows = jobs.preflight(job, None, host=ssh_env.alias)
    # A CPU host plans the job as requested; the model was counted over SFTP.
    assert rows[0] == ("plan", True, plan_job(job).plan_line.removeprefix("plan: "))
    hosts = [detail for name, ok, detail in rows if name == "host" and ok]
    assert hosts[0].startswith("host veri-test: python") and f"model: {model}: " in hosts[-1]
    assert rows[-1] == (
        "output",
        False,
        f"{taken} already exists on veri-test and is not empty; choose another --output",
    )
    free = job.copy_with(update={"output": str(tmp_path / "new")})
    rows = jobs.preflight(free, None, host=ssh_env.alias)
    assert all(ok for _, ok, _ in rows) and ("output", True, f"{free.output} on veri-test") in rows
    # A CPU host: the job runs, on CPU processes, and the preflight says so (issue 35).
    assert rows[1] == ("device", True, (
        "warning: no CUDA GPU on veri-test: the job runs 2 CPU processes (gloo) instead of the "
        "planned 2 x L4-24GB; the plan's memory, speed and cost figures are for those GPUs"
    ))  # fmt: skip
