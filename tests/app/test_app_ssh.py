"""The launch screen against a real sshd on 127.0.0.1: an unknown host key opens the trust
dialog with the server's fingerprint; trusting it records the key and preflight passes. A
model only the host has is planned there (not here) and the job runs there. The monitor
follows a job on the host over one SSH connection for its life."""

from __future__ import annotations

import asyncio
import base64
import getpass
import hashlib
import json
import os
import pwd
import secrets
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from app_helpers import editor_ready, write_job
from textual.widgets import Input, Log, Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.host_key import HostKeyScreen
from veri_tui.app.screens.launch import LaunchScreen
from veri_tui.app.screens.monitor import MonitorScreen
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch import jobs, registry
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.registry import RegistryEntry
from veri_tui.plan import read_model_info
from veri_tui.plan.model_sources import bundled_tiny_model

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

        def shown() -> str:  # the dialog is on screen before it has composed its text
            return " ".join(str(w.render()) for w in dialog.query(Static))

        await _wait(pilot, lambda: expected in shown(), 10, "the dialog's fingerprint")
        assert dialog.host in shown()
        await pilot.press("y")
        await _wait(pilot, lambda: launch.ready, 90, "preflight to pass after trust")
        rows = str(launch.query_one("#preflight", Static).render())
        assert "host gpu-test: python" in rows
        assert host_pub in known_hosts.read_text()


@pytest.mark.timeout(180)
async def test_a_model_only_the_host_has_is_planned_and_launched_there(
    sshd, veri_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `~/` is two places: here a tmp HOME (no model), on the host the remote user's home from
    # the password database (sshd sets HOME from it), where the model is put.
    remote_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    name = f".veri-app-test-{secrets.token_hex(4)}"
    monkeypatch.setenv("HOME", str(tmp_path / "local-home"))
    monkeypatch.setenv("VERI_SSH_CONFIG", str(sshd.ssh_config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("VERI_REMOTE_PYTHON", sys.executable)
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / "remote-veri"))
    model = f"~/{name}/model"
    count = f"{read_model_info(str(bundled_tiny_model())).parameter_count:,}"
    try:
        shutil.copytree(bundled_tiny_model(), remote_home / name / "model")
        app = create_app(model=model)
        async with app.run_test(size=(100, 30)) as pilot:
            await editor_ready(pilot)
            editor = app.screen
            assert editor.info is None and "plan: none here" in str(
                editor.query_one("#plan-line", Static).render()
            )
            sample = str(BUNDLED_DATASETS["sft_text"])  # a model of your own needs one (issue 35)
            for key, value in (("max_steps", "1"), ("max_seq_length", "32"), ("dataset", sample)):
                editor.query_one(f"#knob-{key}", Input).value = value
            await pilot.pause()
            await pilot.press("ctrl+l")
            await _wait(pilot, lambda: isinstance(app.screen, LaunchScreen), 10, "launch screen")
            launch = app.screen
            panel = launch.query_one("#preflight", Static)
            await _wait(pilot, lambda: "FAIL" in str(panel.render()), 30, "local preflight")
            assert "FAIL model: " in str(panel.render())  # not on this machine: refused here
            target = launch.query_one("#target", Select)
            await _wait(pilot, lambda: len(target._options) > 1, 10, "hosts from the ssh config")
            target.value = sshd.alias
            await _wait(pilot, lambda: launch.ready, 90, "the host's preflight to pass")
            rows = str(panel.render())
            assert rows.startswith("ok   plan: dp=1 ")
            assert f"model: {remote_home / name / 'model'}: {count} params" in rows
            await pilot.press("ctrl+l")
            await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 60, "monitor")
            job_id = app.screen.job_id
        final = await asyncio.to_thread(jobs.get_job, job_id)
        deadline = time.monotonic() + 120
        while not has_ended(final):
            assert time.monotonic() < deadline, final
            await asyncio.sleep(1)
            final = await asyncio.to_thread(jobs.get_job, job_id)
        assert final["status"] == "succeeded", final
        assert final["host"] == sshd.alias
        assert final["spec"]["model_path"] == str(remote_home / name / "model")
        assert any(count in line for line in final["spec"]["plan_header"])
    finally:
        shutil.rmtree(remote_home / name, ignore_errors=True)


def _client_ports(server_port: int) -> set[int]:
    """Local ports of this process's open TCP connections to 127.0.0.1:server_port (its own
    sockets only: the session's sshd also serves other tests' leftover connections)."""
    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed while listed
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    remote = f"0100007F:{server_port:04X}"
    rows = [ln.split() for ln in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return {
        int(r[1].split(":")[1], 16)
        for r in rows
        if r[2] == remote and r[3] == "01" and r[9] in mine
    }


async def test_the_monitor_holds_one_ssh_connection_for_its_life(
    sshd, veri_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A running job on the host (this machine through sshd; its "supervisor" this test
    # process): each 0.5 s poll reads job.json, asks `kill -0` and reads the log there. It
    # once cost two SSH handshakes a poll, one never closed; now one connection throughout.
    monkeypatch.setenv("VERI_SSH_CONFIG", str(sshd.ssh_config))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("VERI_REMOTE_PYTHON", sys.executable)
    job_id = "20261206-030000-5555"
    folder = write_job(tmp_path / "remote-veri", job_id, status="running", steps=1)
    (folder / "supervisor.pid").write_text(str(os.getpid()))
    record = json.loads((folder / "job.json").read_text())
    registry.save(RegistryEntry(job_id, sshd.alias, str(folder), str(os.getpid()), sys.executable,
                                record))  # fmt: skip
    seen: set[int] = set()
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            seen.update(_client_ports(sshd.port))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    app = create_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await editor_ready(pilot)
        sampler.start()
        app.open_monitor(job_id)
        await _wait(pilot, lambda: isinstance(app.screen, MonitorScreen), 10, "monitor")
        monitor = app.screen
        await pilot.pause()
        log = monitor.query_one(Log)
        await _wait(pilot, lambda: log.line_count == 5, 30, "the log")
        await pilot.pause(3.0)  # six polls more
        record["status"] = "succeeded"
        (folder / "job.tmp").write_text(json.dumps(record))
        os.replace(folder / "job.tmp", folder / "job.json")
        await _wait(pilot, lambda: monitor.status == "succeeded", 30, "the end")
        await app.workers.wait_for_complete()
        sampling.set()
        sampler.join()
        assert len(seen) == 1, seen
        assert _client_ports(sshd.port) == set()  # closed with the monitor's follow
