"""The disk preflight over SSH: free space measured on the host where the job will write (its
jobs folder under VERI_REMOTE_HOME, the output dir), refused before anything is uploaded.

The 'remote' is this machine through the test sshd; its small filesystem is a tmpfs the test
mounts (root only; CI runs as root).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from veri_tui.errors import VeriError
from veri_tui.launch import jobs
from veri_tui.launch.ssh import launch, preflight
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.disk import size
from veri_tui.plan.sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SETS = ["max_steps=40", "checkpoint_steps=1", "keep_checkpoints=8"]


@pytest.fixture
def small_remote_home(ssh_env, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """An 8 MiB tmpfs as the host's veri home."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    fs = tmp_path / "remote-small"
    fs.mkdir()
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8M", "tmpfs", str(fs)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    monkeypatch.setenv("VERI_REMOTE_HOME", str(fs / "veri"))
    # The preflight keeps 512 MiB free for the uploads on top of the job: on 8 MiB that
    # alone refuses; this test is about the checkpoints.
    monkeypatch.setattr(preflight, "DISK_MARGIN_BYTES", 0)
    yield fs
    subprocess.run(["umount", "-l", str(fs)], check=False)


def test_checkpoints_that_cannot_fit_the_host_are_refused(ssh_env, small_remote_home) -> None:
    job = load_job_config(None, model=str(bundled_tiny_model()), gpu_count=2, sets=SETS)
    with pytest.raises(VeriError) as err:
        launch(job, None, host=ssh_env.alias)
    disk = plan_job(job).disk
    jobs_dir = small_remote_home / "veri" / "jobs"
    [line] = err.value.lines()
    head = (
        f"error: disk: {size(disk.total_bytes)} needed on {ssh_env.alias}:{jobs_dir} (9 "
        f"checkpoints x {size(disk.checkpoint_bytes)} + artifact {size(disk.artifact_bytes)}), "
    )
    assert line.startswith(head), line
    assert line.endswith(" free; lower keep_checkpoints, checkpoint less often, or free space")
    assert list(small_remote_home.iterdir()) == []  # nothing uploaded, no folder made
    rows = jobs.preflight(job, None, host=ssh_env.alias)
    assert ("disk", False, line.removeprefix("error: disk: ")) in rows


def test_a_job_that_fits_the_host_shows_its_disk_row(ssh_env, small_remote_home) -> None:
    job = load_job_config(None, model=str(bundled_tiny_model()), gpu_count=2)
    rows = jobs.preflight(job, None, host=ssh_env.alias)
    disk = plan_job(job).disk
    [(name, ok, detail)] = [r for r in rows if r[0] == "disk"]
    assert ok and detail.startswith(f"{size(disk.total_bytes)} of ")
    assert detail.endswith(f" free on {ssh_env.alias}:{small_remote_home}/veri/jobs (artifact "
                           f"{size(disk.artifact_bytes)})")  # fmt: skip
