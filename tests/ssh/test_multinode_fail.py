"""A 2-node job's failures, over two real sshd servers: the rank on node 1 SIGKILLed (the job
fails naming that rank and node, node 0's processes end), and node 0's rendezvous port
unreachable (refused at the preflight, naming the node that cannot reach it). Times are
printed, not asserted (docs/ssh.md). Cancel of a 2-node job (both nodes' processes end) is
the backend conformance suite's (tests/backends, the two-host backend).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from multinode_helpers import two_node_env
from ssh_helpers import cli

from veri_tui.jobfolder.contract.procs import pid_alive, read_pid
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobs import launch
from veri_tui.launch.jobs import target_for as target_for_job
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids, wait_for  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _running(sshd, sshd2, tmp_path: Path, monkeypatch) -> tuple[str, list[Path]]:
    """A long 2-node job, once rank 0 has logged a metric line; (job id, node folders)."""
    for key, value in two_node_env(sshd, sshd2, tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("VERI_KNOWN_HOSTS", raising=False)
    job = load_job_config(None, model=str(bundled_tiny_model()),
                          sets=["max_steps=100000", "max_seq_length=64"])  # fmt: skip
    job_id = launch(job, None, host=[sshd.alias, sshd2.alias])
    jobs = tmp_path / "remote-veri" / "jobs"
    dirs = [jobs / f"{job_id}-node0", jobs / f"{job_id}-node1"]
    log = dirs[0] / "log.txt"

    def started() -> bool:
        return log.is_file() and '{"step"' in log.read_text(errors="replace")

    wait_for(started, 150, "rank 0's first metric")
    return job_id, dirs


def test_sigkill_of_node_1s_rank_fails_the_job_naming_it(sshd, sshd2, tmp_path, monkeypatch):
    job_id, dirs = _running(sshd, sshd2, tmp_path, monkeypatch)
    rank1 = read_pid(dirs[1] / "pids" / "rank-1")
    rank0 = read_pid(dirs[0] / "pids" / "rank-0")
    assert rank1 and rank0 and pid_alive(rank1)
    target = target_for_job(job_id)
    assert target is not None
    t0 = time.monotonic()
    os.kill(rank1, signal.SIGKILL)
    record = JobHandle(target).wait(poll_s=0.5)
    print(f"failed after {time.monotonic() - t0:.2f} s")
    error = record["error"]
    assert record["status"] == "failed", record
    assert error["summary"].startswith("rank 1/2 (node 1, local_rank 0) failed: "), error
    assert (error["code"], error["attribution"]) == ("RANK_LOST", "platform")
    wait_for(lambda: not leftover_pids(dirs[0]) and not leftover_pids(dirs[1]), 30,
             "every process of both nodes to end")  # fmt: skip
    assert not pid_alive(rank0)
    target.close()


def test_unreachable_rendezvous_port_is_refused_naming_the_node(sshd, sshd2, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens once this closes: a firewalled port
    env = two_node_env(sshd, sshd2, tmp_path)
    endpoint = f"rdzv_endpoint='127.0.0.1:{closed}'"
    out = cli("launch", "--host", sshd.alias, "--host", sshd2.alias, "--model",
              str(bundled_tiny_model()), "--set", endpoint, env=env)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert (f"error: rdzv_endpoint: node 1 ({sshd2.alias}) cannot reach node 0's rendezvous at "
            f"127.0.0.1:{closed} (ConnectionRefusedError") in out.stderr  # fmt: skip
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "remote-veri" / "jobs").exists() or not any(
        (tmp_path / "remote-veri" / "jobs").iterdir()
    )
