"""The CLI's SSH edges: an unknown host refused with the fingerprint to trust (exit 2, one
line), and `jobs` still listing a remote job whose host is unreachable (marked stale)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from veri_tui.launch.ssh import list_jobs, registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args], capture_output=True, text=True, timeout=60
    )


def test_unknown_host_refused_by_launch(ssh_env, tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "config"
    config.write_text(
        ssh_env.ssh_config.read_text().replace(str(ssh_env.known_hosts), str(tmp_path / "kh"))
    )
    monkeypatch.setenv("VERI_SSH_CONFIG", str(config))
    out = _cli("launch", "--host", ssh_env.alias, "--gpu-count", "1")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: host: ")
    assert "--trust-host SHA256:" in lines[0]
    wrong = _cli("launch", "--host", ssh_env.alias, "--trust-host", "SHA256:nope")
    assert wrong.returncode == 2 and "does not match" in wrong.stderr
    assert not (tmp_path / "kh").exists()
    assert not (tmp_path / "remote-veri").exists()  # nothing was uploaded


def test_unreachable_host_listed_stale(ssh_env) -> None:
    record = {"job_id": "20260101-000000-dead", "status": "running", "spec": {"gpu_count": 2}}
    registry.save(
        registry.RemoteJob(record["job_id"], "root@127.0.0.1:1", "/nowhere", 1, "python3", record)
    )
    [listed] = list_jobs()
    assert listed["stale"] is True and listed["status"] == "running"
    assert listed["host"] == "root@127.0.0.1:1"
    out = _cli("jobs", "--json")
    assert json.loads(out.stdout)[0]["stale"] is True
