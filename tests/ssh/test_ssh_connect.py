"""Reaching the test sshd every way the config allows, and failing in one clear line."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from veri_tui.errors import VeriError
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.hosts import resolve_host

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

RELAY = """\
import socket, sys, threading
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def up():
    while chunk := sys.stdin.buffer.read1(65536):
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while chunk := s.recv(65536):
    sys.stdout.buffer.write(chunk)
    sys.stdout.buffer.flush()
"""


def _identity(sshd) -> str:
    return f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"


def test_include_glob_relative_to_config_folder(ssh_env, tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-gpu.conf").write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n{_identity(ssh_env)}"
    )
    (tmp_path / "conf.d" / "README").write_text("not matched by the glob\n")
    config = tmp_path / "config"
    config.write_text("Include conf.d/*.conf\n")
    spec = resolve_host("gpu-box", config)
    assert (spec.hostname, spec.port) == ("127.0.0.1", ssh_env.port)
    conn = Connection.open("gpu-box", config_path=config)
    assert conn.run(["echo", "hi"]).stdout == b"hi\n"
    conn.close()


def test_user_at_host_port_literal_with_default_key_files(
    ssh_env, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("VERI_KNOWN_HOSTS", str(ssh_env.known_hosts))
    monkeypatch.setenv("VERI_SSH_CONFIG", str(tmp_path / "absent_config"))
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.ssh/id_* looked up here
    target = f"root@127.0.0.1:{ssh_env.port}"
    spec = resolve_host(target)
    assert (spec.user, spec.hostname, spec.port) == ("root", "127.0.0.1", ssh_env.port)
    with pytest.raises(VeriError, match="authentication failed") as err:
        Connection.open(target, timeout=5)
    assert len(err.value.lines()) == 1
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_bytes(ssh_env.user_key.read_bytes())
    conn = Connection.open(target, timeout=5)
    assert conn.run(["whoami"]).stdout == b"root\n"
    conn.close()


def test_proxy_jump_through_a_direct_tcpip_channel(ssh_env, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        f"Host jump\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n{_identity(ssh_env)}"
        f"Host behind\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n  ProxyJump jump\n"
        f"{_identity(ssh_env)}"
    )
    conn = Connection.open("behind", config_path=config)
    assert len(conn._clients) == 2  # the jump host, then the target through it
    assert conn.run(["echo", "behind"]).stdout == b"behind\n"
    conn.close()


def test_proxy_command(ssh_env, tmp_path: Path) -> None:
    relay = tmp_path / "relay.py"
    relay.write_text(RELAY)
    config = tmp_path / "config"
    config.write_text(
        f"Host viacmd\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n"
        f"  ProxyCommand {sys.executable} {relay} %h %p\n{_identity(ssh_env)}"
    )
    conn = Connection.open("viacmd", config_path=config)
    assert conn.run(["echo", "relayed"]).stdout == b"relayed\n"
    assert conn.probe(timeout=3)
    conn.close()


def test_stdout_stderr_exit_status_and_stdin(ssh_env) -> None:
    conn = Connection.open(ssh_env.alias)
    # More than one channel window on both streams at once: must not stall.
    code = (
        "import sys; big = 'x' * 300_000; print(big); print(big, file=sys.stderr); "
        "sys.stdout.write(sys.stdin.read()); sys.exit(3)"
    )
    res = conn.run([sys.executable, "-c", code], stdin=b"from stdin")
    assert res.exit_status == 3
    assert res.stdout == ("x" * 300_000 + "\nfrom stdin").encode()
    assert res.stderr == ("x" * 300_000 + "\n").encode()
    conn.close()


def test_silent_server_times_out(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts TCP but never sends an SSH banner
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(VeriError, match="timed out|cannot connect") as err:
            Connection.open(
                f"root@127.0.0.1:{port}",
                config_path=tmp_path / "none",
                known_hosts=str(tmp_path / "kh"),
                timeout=2,
            )
        assert time.monotonic() - start < 10
        assert err.value.lines()[0].startswith("error: host: ")
