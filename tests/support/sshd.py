"""A real OpenSSH server on 127.0.0.1 for the tests; nothing about SSH is mocked.

`serve` (the session fixtures `sshd`, `sshd2` in support/session.py, and any test that needs
a server of its own) generates host and user keys with ssh-keygen, writes its own sshd_config,
known_hosts and client config, checks the config with `sshd -t`, and runs
`/usr/sbin/sshd -D -e -f CONFIG` on a free loopback port. Without /usr/sbin/sshd the tests
skip with the reason, unless VERI_REQUIRE_SSHD=1 (CI), where they fail instead.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import server_port

SSHD = "/usr/sbin/sshd"
ALIAS = "veri-test"


@dataclass
class Sshd:
    """The running test server and the client-side files that reach it."""

    port: int
    root: Path
    ssh_config: Path
    known_hosts: Path
    user_key: Path
    host_key_line: str
    proc: subprocess.Popen
    alias: str = ALIAS

    @staticmethod
    def keygen(path: Path) -> Path:
        """A fresh unencrypted ed25519 key pair at `path` (+ `.pub`)."""
        return keygen(path)

    def session_pids(self, client_port: int) -> list[int]:
        """The server-side processes serving the TCP connection from `client_port`."""
        inodes = _socket_inodes(self.port, client_port)
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == self.proc.pid:
                continue
            try:
                links = {os.readlink(fd) for fd in (proc / "fd").iterdir()}
            except OSError:
                continue
            if any(f"socket:[{i}]" in links for i in inodes):
                pids.append(int(proc.name))
        return pids

    def signal_session(self, client_port: int, sig: int) -> list[int]:
        """Send `sig` to every server process of that connection (kill or freeze it)."""
        pids = self.session_pids(client_port)
        assert pids, f"no sshd session found for client port {client_port}"
        for pid in pids:
            os.kill(pid, sig)
        return pids


def _socket_inodes(server_port: int, client_port: int) -> set[str]:
    """Inodes of the server end of 127.0.0.1:client_port -> 127.0.0.1:server_port."""
    want_local = f"0100007F:{server_port:04X}"
    want_remote = f"0100007F:{client_port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if parts[1] == want_local and parts[2] == want_remote:
            inodes.add(parts[9])
    return inodes


def keygen(path: Path) -> Path:
    """A fresh unencrypted ed25519 key pair at `path` (+ `.pub`)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "veri-test", "-f", str(path)],
        check=True,
    )
    return path


def _write_server_config(
    root: Path, port: int, host_key: Path, user_key: Path, extra: str = ""
) -> Path:
    auth = root / "authorized_keys"
    auth.write_text(Path(f"{user_key}.pub").read_text())
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\n"
        f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {auth}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "AllowTcpForwarding yes\nSubsystem sftp internal-sftp\nLogLevel VERBOSE\n" + extra
    )
    return config


def _wait_listening(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"sshd did not listen on 127.0.0.1:{port} within 10 s")


def serve(tmp_path_factory: pytest.TempPathFactory, alias: str, extra: str = "") -> Iterator[Sshd]:
    """A running server for ``alias``; ``extra``: more sshd_config lines (a Slurm login
    node's `SetEnv SLURM_CONF=...`, tests/slurm)."""
    if not os.access(SSHD, os.X_OK):
        reason = f"{SSHD} is missing: apt-get install openssh-server (CI sets VERI_REQUIRE_SSHD=1)"
        if os.environ.get("VERI_REQUIRE_SSHD") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("sshd")
    host_key = keygen(root / "host_ed25519")
    user_key = keygen(root / "user_ed25519")
    port = server_port()
    config = _write_server_config(root, port, host_key, user_key, extra)
    os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, f"sshd -t rejected the config: {check.stderr}"
    host_pub = Path(f"{host_key}.pub").read_text().split()
    line = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}"
    known_hosts = root / "known_hosts"
    known_hosts.write_text(line + "\n")
    ssh_config = root / "ssh_config"
    ssh_config.write_text(
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {user_key}\n  UserKnownHostsFile {known_hosts}\n"
    )
    log = root / "sshd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=out, stdout=out)
    _wait_listening(port, proc, log)
    yield Sshd(port, root, ssh_config, known_hosts, user_key, line, proc, alias)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
