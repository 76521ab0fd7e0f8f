"""How long `veri-tui serve` takes to stop on SIGTERM with a tab open, and what it leaves.

Each trial starts `veri-tui serve --port 0` (tests/support/served.py), opens one tab (a
websocket client sending the page's Origin, as a browser does) and waits for the app's first
screen, then sends the server SIGTERM and times it to its exit. It checks that the tab was
closed with 1001 (going away: the page says "Session ended") and that the tab's app process
is gone. The figures go into docs/reliability.md by hand (the `veri-tui serve` stopped row);
tests/web/test_serve_lifecycle.py checks the same outcome without timing it.

    python benchmarks/bench_serve_stop.py [--trials 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the web tests' support code starts the server

from support.served import Tab, alive, start_served, wait_until  # noqa: E402


def trial(folder: Path) -> tuple[float, int | None, bool]:
    """One stop: (seconds from SIGTERM to the server's exit, the tab's close code, whether
    its app process was left)."""
    served = start_served(folder)
    try:
        tab = Tab(served)
        wait_until(lambda: tab.received > 2000 or tab.ended.is_set(), 120, "the first screen")
        apps = served.children()
        started = time.monotonic()
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    tab.ended.wait(10)
    time.sleep(0.2)  # the kernel's reaping of an app that was just killed
    return took, tab.close_code, any(alive(pid) for pid in apps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5)
    args = p.parse_args(argv)
    times = []
    for k in range(args.trials):
        with tempfile.TemporaryDirectory() as tmp:
            took, code, left = trial(Path(tmp))
        times.append(took)
        load = os.getloadavg()[0]
        print(f"trial {k + 1}: stopped {took:.2f} s after SIGTERM, tab closed {code}, "
              f"app left: {left}, load {load:.1f}")  # fmt: skip
    print(f"SIGTERM to exit, one tab: median {statistics.median(times):.2f} s, "
          f"{min(times):.2f}-{max(times):.2f} s over {len(times)} trials")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
