"""The launch screen against a real sshd on 127.0.0.1: an unknown host key opens the trust
dialog with the server's fingerprint; trusting it records the key and preflight passes."""

from __future__ import annotations

import base64
import getpass
import hashlib
import importlib.util
import sys
import time
from pathlib import Path

import pytest
from app_helpers import editor_ready
from textual.widgets import Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.launch import HostKeyScreen, LaunchScreen


def _load_ssh_fixtures():
    """The SSH tests' real-sshd fixture, loaded from their conftest by path (one server)."""
    path = Path(__file__).resolve().parents[1] / "ssh" / "conftest.py"
    spec = importlib.util.spec_from_file_location("veri_ssh_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["veri_ssh_fixtures"] = module
    spec.loader.exec_module(module)
    return module


sshd = _load_ssh_fixtures().sshd  # re-exported so pytest collects the fixture here

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


async def _wait(pilot, cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.1)


async def test_unknown_host_key_dialog_then_trusted_preflight(
    sshd, veri_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    config = tmp_path / "ssh_config_app"
    config.write_text(
        f"Host gpu-test\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {sshd.user_key}\n  UserKnownHostsFile {known_hosts}\n"
    )
    monkeypatch.setenv("VERI_SSH_CONFIG", str(config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("VERI_REMOTE_PYTHON", sys.executable)
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / "remote-veri"))
    app = create_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+l")
        await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
        launch = app.screen
        target = launch.query_one("#target", Select)
        await _wait(pilot, lambda: len(target._options) > 1, 10, "hosts from the ssh config")
        target.value = "gpu-test"
        await _wait(pilot, lambda: isinstance(app.screen, HostKeyScreen), 30, "trust dialog")
        await pilot.press("n")  # refused: nothing recorded, launch stays disabled
        await pilot.pause()
        assert app.screen is launch and not launch.ready
        assert "not trusted yet" in str(launch.query_one("#preflight", Static).render())
        assert known_hosts.read_text() == ""
        await pilot.press("ctrl+r")  # re-check asks again
        await _wait(pilot, lambda: isinstance(app.screen, HostKeyScreen), 30, "trust dialog")
        dialog = app.screen
        host_pub = Path(f"{sshd.root}/host_ed25519.pub").read_text().split()[1]
        digest = hashlib.sha256(base64.b64decode(host_pub)).digest()
        expected = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
        assert dialog.fingerprint == expected
        assert str(sshd.port) in dialog.host
        shown = " ".join(str(w.render()) for w in dialog.query(Static))
        assert expected in shown and dialog.host in shown
        await pilot.press("y")
        await _wait(pilot, lambda: launch.ready, 60, "preflight to pass after trust")
        rows = str(launch.query_one("#preflight", Static).render())
        assert "host gpu-test: python" in rows
        assert host_pub in known_hosts.read_text()
