"""Reaching the test sshd every way the config allows, and failing in one clear line."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from veri_tui.errors import VeriError
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.hosts import resolve_host
from veri_tui.launch.ssh.preflight import run_preflight
from veri_tui.launch.ssh.remote_model import hub_cache_dir, remote_hub_cache
from veri_tui.plan import read_model_info
from veri_tui.plan.model_sources import bundled_tiny_model

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


def test_makedirs_from_two_sessions_at_once(ssh_env, tmp_path: Path) -> None:
    """Two nodes on one shared home make the same jobs folder in parallel (multi-node
    launch): the one that loses the race sees SFTP's bare "Failure", which is not an error
    when the folder is there."""
    from concurrent.futures import ThreadPoolExecutor

    from veri_tui.launch.ssh import files

    conns = [Connection.open(ssh_env.alias) for _ in range(2)]
    for round_ in range(5):
        target = str(tmp_path / f"home-{round_}" / "jobs" / "x")
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda c, t=target: files.makedirs(c.sftp(), t), conns))
        assert Path(target).is_dir()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):  # a file in the way is still refused
        files.makedirs(conns[0].sftp(), str(tmp_path / "a-file" / "sub"))
    for conn in conns:
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


def test_lines_after_an_include_stay_in_their_block(tmp_path: Path) -> None:
    # OpenSSH: after an Include, lines belong to the block the Include stood in, not to the
    # included file's last Host (and a top-level Include leaves later lines global).
    (tmp_path / "top.conf").write_text("Host c\n  User carol\n")
    (tmp_path / "extra.conf").write_text("Host b\n  User dave\n  Port 2200\n")
    config = tmp_path / "config"
    config.write_text(
        "Include top.conf\nConnectTimeout 7\n"
        "Host a\n  HostName 10.0.0.1\n  Include extra.conf\n  User bob\n  Port 2201\n"
    )
    a, b, c = (resolve_host(name, config) for name in ("a", "b", "c"))
    assert (a.hostname, a.user, a.port, a.connect_timeout) == ("10.0.0.1", "bob", 2201, 7.0)
    assert (b.hostname, b.user, b.port, b.connect_timeout) == ("b", "dave", 2200, 7.0)
    assert (c.user, c.port, c.connect_timeout) == ("carol", 22, 7.0)


@pytest.fixture
def sshd_with_hf_home(ssh_env, tmp_path: Path, monkeypatch) -> Iterator[tuple[str, Path]]:
    """Another server with the test sshd's keys that sets HF_HOME in its sessions (sshd's
    SetEnv: what a host's environment gives its users); yields (alias, HF_HOME)."""
    hf_home = tmp_path / "remote-hf-home"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = ssh_env.root
    server = (root / "sshd_config").read_text().replace(f"Port {ssh_env.port}\n", f"Port {port}\n")
    server = server.replace(str(root / "sshd.pid"), str(tmp_path / "sshd.pid"))
    (tmp_path / "sshd_config").write_text(server + f"SetEnv HF_HOME={hf_home}\n")
    known = tmp_path / "known_hosts"
    known.write_text(ssh_env.host_key_line.replace(f":{ssh_env.port} ", f":{port} ") + "\n")
    (tmp_path / "ssh_config").write_text(
        f"Host hf-env\n  HostName 127.0.0.1\n  Port {port}\n  IdentityFile {ssh_env.user_key}\n"
        f"  UserKnownHostsFile {known}\n"
    )
    monkeypatch.setenv("VERI_SSH_CONFIG", str(tmp_path / "ssh_config"))
    proc = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):  # until it listens (or exits)
            with socket.socket() as s:
                if proc.poll() is not None or s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the second sshd did not start"
        yield "hf-env", hf_home
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_remote_hub_cache_follows_the_hosts_hf_home(sshd_with_hf_home) -> None:
    alias, hf_home = sshd_with_hf_home
    snapshot = hf_home / "hub" / "models--acme--tiny" / "snapshots" / "abc123"
    shutil.copytree(bundled_tiny_model(), snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    conn = Connection.open(alias)
    try:
        home = str(Path.home())
        assert remote_hub_cache(conn, home) == f"{hf_home}/hub"
        pf = run_preflight(conn, model="acme/tiny")
    finally:
        conn.close()
    assert pf.problems == [] and pf.model_path == str(snapshot)
    assert pf.model_info.parameter_count == read_model_info(str(snapshot)).parameter_count


def test_hub_cache_resolution_order() -> None:
    home = "/home/u"
    assert hub_cache_dir({}, home) == "/home/u/.cache/huggingface/hub"
    assert hub_cache_dir({"XDG_CACHE_HOME": "/c"}, home) == "/c/huggingface/hub"
    assert hub_cache_dir({"HF_HOME": "~/hf", "XDG_CACHE_HOME": "/c"}, home) == "/home/u/hf/hub"
    env = {"HF_HUB_CACHE": "/data/hub", "HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/hf"}
    assert hub_cache_dir(env, home) == "/data/hub"
    assert hub_cache_dir({"HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/hf"}, home) == "/old"
    assert hub_cache_dir({"HF_HOME": " "}, home) == "/home/u/.cache/huggingface/hub"
