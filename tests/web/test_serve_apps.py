"""A served app's end (veri_tui/web/apps.py), on real processes under asyncio's real child
watcher: an app that quits when asked is waited for, with its own exit status, not killed
mid-exit; only a stuck one is killed, within the bound.

The stand-in apps are tiny Pythons that speak as much of textual-serve's protocol as `end()`
needs: the `__GANGLION__` prelude, then they read stdin, where the quit arrives. Killing an
app that was already exiting is what made `veri-tui serve` log `Unknown child process pid N,
will report returncode 255` on its stop: subprocess's kill() polls the process first, and
that waitpid could take the exit status from asyncio's child watcher. A stand-in that lingers
0.5 s after closing its output (as an interpreter does while it exits) makes the old kill
certain here, where the race itself is not.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import pytest

from veri_tui.web import apps
from veri_tui.web.apps import VeriAppService

PRELUDE = "import os, sys, time; sys.stdout.write('__GANGLION__\\n'); sys.stdout.flush(); "
QUITS = PRELUDE + "sys.stdin.buffer.read(1); os.close(1); time.sleep(0.5); os._exit(7)"
STUCK = PRELUDE + "time.sleep(60)"


class _Downloads:
    async def cancel_app_downloads(self, app_service_id: str) -> None:
        return None


async def _ignore(*_args: object) -> None:
    return None


async def _end(code: str) -> tuple[int | None, float]:
    """Start a stand-in app, end it as the server does: (its returncode, seconds end took)."""
    service = VeriAppService([sys.executable, "-S", "-c", code], write_bytes=_ignore,
                             write_str=_ignore, close=_ignore, download_manager=_Downloads(),
                             debug=False)  # fmt: skip
    await service.start(80, 24)
    await asyncio.sleep(0.3)  # its prelude read: the service is running
    started = time.monotonic()
    await service.end()
    assert service._process is not None
    return service._process.returncode, time.monotonic() - started


def test_an_app_that_quits_is_waited_for_not_killed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        code, took = asyncio.run(_end(QUITS))
    assert code == 7  # its own exit status: not -9 (killed) nor asyncio's 255
    assert took < apps.QUIT_TIMEOUT_S
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]


def test_a_stuck_app_is_killed_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "QUIT_TIMEOUT_S", 1.0)
    code, took = asyncio.run(_end(STUCK))
    assert code == -9 and 1.0 <= took < 2.0
