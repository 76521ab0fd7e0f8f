"""Host keys against a real sshd: unknown refused, explicit trust recorded, changed refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.hostkeys import ChangedHostKeyError, UnknownHostKeyError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def _server_fingerprint(sshd) -> str:
    with pytest.raises(UnknownHostKeyError) as err:
        Connection.open(sshd.alias, known_hosts=str(sshd.root / "nonexistent_known_hosts"))
    return err.value.fingerprint


def test_unknown_host_refused_then_trusted_and_recorded(ssh_env, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    with pytest.raises(UnknownHostKeyError) as err:
        Connection.open(ssh_env.alias, known_hosts=str(kh))
    exc = err.value
    assert exc.host == f"[127.0.0.1]:{ssh_env.port}"
    assert exc.fingerprint.startswith("SHA256:")
    line = exc.lines()[0]
    assert f"--trust-host {exc.fingerprint}" in line and line.startswith("error: host: ")
    assert not kh.exists(), "a refused host must not be recorded"

    # The fingerprint is the one ssh-keygen reports for the server's host key.

    keygen_out = subprocess.run(
        ["ssh-keygen", "-lf", str(ssh_env.root / "host_ed25519.pub")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert exc.fingerprint in keygen_out

    with pytest.raises(UnknownHostKeyError, match="not one given with --trust-host"):
        Connection.open(ssh_env.alias, known_hosts=str(kh), trust="SHA256:" + "A" * 43)
    assert not kh.exists()

    conn = Connection.open(ssh_env.alias, known_hosts=str(kh), trust=exc.fingerprint)
    assert conn.run(["true"]).exit_status == 0
    conn.close()
    recorded = kh.read_text()
    assert recorded.startswith(f"[127.0.0.1]:{ssh_env.port} ssh-ed25519 ")

    # Recorded trust is enough next time, without --trust-host.
    conn = Connection.open(ssh_env.alias, known_hosts=str(kh))
    conn.close()


def test_changed_host_key_always_refused(ssh_env, tmp_path: Path) -> None:
    other = ssh_env.keygen(tmp_path / "impostor")
    kind, blob = Path(f"{other}.pub").read_text().split()[:2]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{ssh_env.port} {kind} {blob}\n")
    real = _server_fingerprint(ssh_env)
    for trust in (None, real):
        with pytest.raises(ChangedHostKeyError) as err:
            Connection.open(ssh_env.alias, known_hosts=str(kh), trust=trust)
        assert "CHANGED" in str(err.value) and real in str(err.value)
        assert "ssh-keygen -R" in str(err.value)
    assert kh.read_text() == f"[127.0.0.1]:{ssh_env.port} {kind} {blob}\n"
