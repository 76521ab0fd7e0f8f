"""`veri-tui serve`'s stop, with a tab open: SIGTERM closes it and ends its app; SIGKILL
leaves no app behind.

Each test has its own server (it is stopped or killed on purpose) and one `Tab`, a
websocket client sending the page's Origin (tests/support/served.py). The SIGTERM bound
(15 s) only guards against a hang: how fast it stops is measured by
benchmarks/bench_serve_stop.py and written in docs/reliability.md.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from support.served import Tab, alive, start_served, wait_until

# slow: an app process per test (seconds on a loaded machine); CI's main step runs it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def open_tab(served) -> tuple[Tab, int]:
    """A tab whose app has drawn its first screen; (the tab, its app's pid)."""
    tab = Tab(served)
    wait_until(lambda: tab.received > 2000 or tab.ended.is_set(), 90, "the app's first screen")
    assert not tab.ended.is_set(), "the server closed the tab"
    apps = served.children()
    assert len(apps) == 1, apps
    return tab, apps.pop()


def test_sigterm_with_a_tab_open_closes_it_and_ends_its_app(tmp_path) -> None:
    served = start_served(tmp_path)
    try:
        tab, app = open_tab(served)
        started = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=15)  # a hang guard; the time itself goes into the docs
        print(f"stopped {time.monotonic() - started:.2f} s after SIGTERM")
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    assert served.proc.returncode == 0
    assert tab.ended.wait(10)
    assert tab.close_code == 1001  # going away: the page shows "Session ended"
    assert not alive(app)


def test_a_sigkilled_server_leaves_no_app_process(tmp_path) -> None:
    served = start_served(tmp_path)
    try:
        _, app = open_tab(served)
        os.kill(served.proc.pid, signal.SIGKILL)
        served.proc.wait(timeout=15)
        wait_until(lambda: not alive(app), 10, f"app process {app} to end")
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
