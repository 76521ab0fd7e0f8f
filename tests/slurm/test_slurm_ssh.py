"""`--slurm ALIAS`: the login node reached over SSH (a real sshd on 127.0.0.1 whose sessions
see the test cluster's SLURM_CONF, as a login node's see its /etc/slurm): the job folder is
uploaded there, submitted with sbatch there, read, listed and followed from here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import cli, losses, processes_of
from ssh.conftest import Sshd, _serve
from support.slurm_cluster import SlurmCluster

from veri_tui.launch import jobs

ALIAS = "veri-slurm-login"


pytestmark = pytest.mark.slow  # a Slurm job through sshd: left out of lowest.sh's fast set


@pytest.fixture(scope="module")
def login(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """An sshd for the login node: its sessions get SLURM_CONF (sshd_config SetEnv)."""
    yield from _serve(tmp_path_factory, ALIAS, f"SetEnv SLURM_CONF={slurm_cluster.conf}\n")


@pytest.fixture
def ssh_home(
    login: Sshd, slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The client pointed at the login node; the 'remote' home is a tmp folder here."""
    monkeypatch.setenv("VERI_SSH_CONFIG", str(login.ssh_config))
    monkeypatch.delenv("VERI_KNOWN_HOSTS", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("VERI_REMOTE_PYTHON", sys.executable)
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / "remote-veri"))
    monkeypatch.setenv("VERI_HOME", str(tmp_path / "local-veri"))
    # What the SSH session does not pass on must not matter: the job runs the uploaded code.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path / "remote-veri"


def test_a_job_through_an_ssh_login_node(
    slurm: SlurmCluster, ssh_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "launch", "--slurm", ALIAS, "--partition", "nope")
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: partition: nope: no such partition on the Slurm cluster of "
        f"{ALIAS}; pass --partition with one of debug, gpu, odd"
    )
    assert err.count("\n") == 1 and not (ssh_home / "slurm").exists()
    code, out, err = cli(
        capsys, "launch", "--slurm", ALIAS, "--gpus-per-node", "2", "--set", "max_steps=3", "--wait"
    )
    assert code == 0, err + out
    job_id = out.splitlines()[0]
    assert "\nstep 3/3  loss " in out  # the log followed from here, to its end (rows)
    job_dir = ssh_home / "slurm" / "jobs" / job_id
    assert (job_dir / "pkg" / "veri_tui" / "jobfolder").is_dir() and (
        job_dir / "sbatch.sh"
    ).is_file()
    assert f"PYTHONPATH={job_dir}/pkg " in (job_dir / "sbatch.sh").read_text()
    assert len(losses(job_dir)) == 3
    record = jobs.get_job(job_id)
    assert (record["status"], record["host"]) == ("succeeded", f"slurm:{ALIAS}")
    code, out, _ = cli(capsys, "jobs")
    assert f"{job_id}  succeeded  slurm:{ALIAS}" in out
    assert slurm.jobs() == [] and not processes_of(job_dir)
