"""The launch screen with two hosts picked (two real sshd servers on 127.0.0.1, one node
each): the preflight shows both nodes' rows, the layout, the rendezvous probe and the plan
for two nodes, through the launch facade. Launching from here is left to the CLI's 2-node
test (tests/ssh/test_multinode_job.py), which runs the same facade."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from app_helpers import editor_ready, until
from textual.widgets import Input, Select, Static

from veri_tui.app import create_app
from veri_tui.app.screens.launch import LaunchScreen
from veri_tui.plan.model_sources import bundled_tiny_model

SSH_TESTS = Path(__file__).resolve().parents[1] / "ssh"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


two_node_env = _load("veri_multinode_helpers", SSH_TESTS / "multinode_helpers.py").two_node_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_two_hosts_show_both_nodes_rows_and_the_layout(
    sshd, sshd2, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in two_node_env(sshd, sshd2, tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("VERI_KNOWN_HOSTS", raising=False)
    app = create_app(model=str(bundled_tiny_model()))
    async with app.run_test(size=(110, 40)) as pilot:
        await editor_ready(pilot)
        app.screen.query_one("#knob-gpu_count", Input).value = "2"  # nodes x 1 CPU process
        await pilot.pause()
        await pilot.press("ctrl+l")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), "launch screen")
        launch = app.screen
        panel = launch.query_one("#preflight", Static)
        target = launch.query_one("#target", Select)
        await until(pilot, lambda: len(target._options) > 2, "both hosts from the config")
        more = launch.query_one("#direct-host", Input)  # direct's `more hosts`
        more.focus()
        await pilot.press(*sshd2.alias)  # not checked per key: the panel asks for Enter
        await until(pilot, lambda: "enter: check" in str(panel.render()), "the Enter hint")
        assert not launch.ready
        target.value = sshd.alias  # node 0; the field names node 1
        more.focus()
        await pilot.press("enter")
        await until(pilot, lambda: launch.ready, "both nodes' preflight", 2400)
        rows = str(panel.render()).splitlines()
    text = "\n".join(rows)
    assert rows[0].startswith("ok   plan: dp=2 "), text  # one rank on each node
    for k, alias in enumerate((sshd.alias, sshd2.alias)):
        assert any(r.startswith(f"ok   node {k} ({alias}): python ") for r in rows), text
        assert any(r.startswith(f"ok   node {k} ({alias}): gpus: 0 CUDA") for r in rows), text
    assert f"ok   nodes: 2 x 1 GPU ({sshd.alias}, {sshd2.alias})" in rows, text
    assert any(r.startswith("ok   rendezvous: 127.0.0.1:") for r in rows), text
    assert any(r.startswith("ok   storage: one shared filesystem") for r in rows), text  # one box
    assert "FAIL" not in text
