"""Fixtures for the app tests: an isolated VERI_HOME, HF cache and SSH config per test, and
no start-up helper (veri_tui.app.first_plan; tested on its own in test_app_start.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def veri_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """VERI_HOME, HF cache and SSH config inside tmp_path; the Hub is offline."""
    home = tmp_path / "veri"
    monkeypatch.setenv("VERI_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # No start-up helper process per app (test_app_start.py runs it): less CPU per test.
    monkeypatch.setenv("VERI_FIRST_PLAN", "0")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host gpu-box\n  HostName 127.0.0.1\n  Port 1\n")
    monkeypatch.setenv("VERI_SSH_CONFIG", str(ssh_config))
    monkeypatch.chdir(tmp_path)
    return home
