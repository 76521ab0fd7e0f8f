"""The SSH tests' fixtures: the session's test servers (`sshd`, `sshd2`) come from
support/session.py (tests/conftest.py shares them with every folder); `ssh_env` points the
client at `sshd`, with the 'remote' this machine in tmp folders.

`Sshd`, `_serve` and `keygen` are re-exported for the tests that start a server of their own
(support/sshd.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.sshd import ALIAS, SSHD, Sshd, keygen
from support.sshd import serve as _serve

__all__ = ["ALIAS", "SSHD", "Sshd", "_serve", "keygen", "ssh_env"]


@pytest.fixture
def ssh_env(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sshd:
    """Point the client at the test server; the 'remote' is this machine, in tmp folders."""
    monkeypatch.setenv("VERI_SSH_CONFIG", str(sshd.ssh_config))
    monkeypatch.delenv("VERI_KNOWN_HOSTS", raising=False)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent: keys come from the config
    monkeypatch.setenv("VERI_REMOTE_PYTHON", sys.executable)
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / "remote-veri"))
    monkeypatch.setenv("VERI_HOME", str(tmp_path / "local-veri"))
    return sshd
