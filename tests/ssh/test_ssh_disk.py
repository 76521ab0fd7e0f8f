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
from multinode_helpers import two_node_env

from veri_tui.errors import VeriError
from veri_tui.launch import jobs
from veri_tui.launch.jobs import launch
from veri_tui.launch.nodes import node_disk
from veri_tui.launch.ssh import preflight
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.disk import DiskEstimate, size
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
SETS = ["max_steps=40", "checkpoint_steps=1", "keep_checkpoints=8"]


@pytest.fixture
def small_remote_home(ssh_env, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """An 8 MiB tmpfs as the host's veri home."""
    yield from _small_home(tmp_path, monkeypatch)


def _small_home(tmp_path: Path, monkeypatch) -> Iterator[Path]:
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


def test_node_disk_is_each_nodes_share() -> None:
    """Rank-local multi-node checkpoints: a node holds its ranks' shards under FSDP2, a whole
    copy per rank under DDP; the artifact only on node 0."""
    disk = DiskEstimate(checkpoint_bytes=1000, checkpoints=3, why="w", artifact_bytes=50)
    assert node_disk(disk, 3, nodes=2, per_node=4, node=0) == disk._replace(checkpoint_bytes=500)
    assert node_disk(disk, 3, nodes=2, per_node=4, node=1) == disk._replace(
        checkpoint_bytes=500, artifact_bytes=0
    )
    assert node_disk(disk, 0, nodes=2, per_node=4, node=1).checkpoint_bytes == 4000
    assert node_disk(disk, 2, nodes=3, per_node=1, node=2).checkpoint_bytes == 334  # rounded up


def test_a_multinode_job_is_refused_naming_every_node_short_of_disk(
    sshd, sshd2, tmp_path: Path, monkeypatch
) -> None:
    for key, value in two_node_env(sshd, sshd2, tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("VERI_KNOWN_HOSTS", raising=False)
    fs = next(_small_home(tmp_path, monkeypatch))  # both nodes are this machine: one tmpfs
    try:
        job = load_job_config(None, model=str(bundled_tiny_model()), sets=SETS)
        with pytest.raises(VeriError) as err:
            launch(job, None, host=[sshd.alias, sshd2.alias])
        lines = err.value.lines()
        assert [ln.split(": ")[2] for ln in lines] == [
            f"node 0 ({sshd.alias})",
            f"node 1 ({sshd2.alias})",
        ], lines
        assert "artifact" in lines[0] and "artifact" not in lines[1]  # written on node 0 only
        assert all(ln.startswith("error: disk: node ") for ln in lines), lines
        assert not (fs / "veri" / "jobs").exists() or not any((fs / "veri" / "jobs").iterdir())
        rows = jobs.preflight(job, None, host=[sshd.alias, sshd2.alias])
        refused = [r for r in rows if r[0] == "disk" and not r[1]]
        assert [r[2] for r in refused] == [ln.removeprefix("error: disk: ") for ln in lines]
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)
