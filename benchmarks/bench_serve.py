"""The served app in headless Chromium: a screenshot, and keystroke latency in the page.

Starts `veri-tui serve --port 0` (tests/support/served.py) and Debian's chromium through
chromedriver (tests/support/browser.py, which says how the page's text is read from
xterm.js), loads the tokened page, saves a PNG of the app showing its plan (docs/app.md
shows it), then types digits into gpu_count and times each key from the moment Selenium
sends it to the moment the page's terminal shows the new plan line: the browser, the
websocket, textual-serve's relay, the app and xterm.js together. Polling the page costs a
few milliseconds per look, so the figure is an upper bound.

    python benchmarks/bench_serve.py [--keys 12] [--png docs/images/served-app.png]

Needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium
chromium-driver) and selenium (the dev extra). Results go into docs/app.md by hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the web tests' support code drives the browser

from support.browser import (  # noqa: E402
    BACKSPACE,
    END,
    click_terminal,
    focus_field,
    missing_browser,
    screen_text,
    start_chromium,
    type_keys,
    wait_for_text,
)
from support.served import start_served  # noqa: E402


def key_latency(driver, digit: str) -> float:
    """Seconds from sending `digit` (into an emptied gpu_count) to its plan line in the page."""
    type_keys(driver, END, BACKSPACE)
    wait_for_text(driver, " gpu_count           default 1 ")
    start = time.perf_counter()
    type_keys(driver, digit)
    while f"plan: dp={digit} " not in (screen_text(driver) or ""):
        if time.perf_counter() - start > 30:
            raise SystemExit(f"the page never showed plan: dp={digit}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=12)
    parser.add_argument("--png", default=str(ROOT / "docs" / "images" / "served-app.png"))
    args = parser.parse_args()
    if missing := missing_browser():
        raise SystemExit(f"needs {', '.join(missing)}")
    with tempfile.TemporaryDirectory() as tmp:
        served = start_served(Path(tmp))
        driver = start_chromium(Path(tmp) / "chromium")
        try:
            start = time.perf_counter()
            driver.get(served.url)
            wait_for_text(driver, "plan: dp=1 ")
            loaded = time.perf_counter() - start
            wait_for_text(driver, "tokens/s vs gpu_count")  # the charts are drawn too
            click_terminal(driver)  # (the middle of the charts) the page has the focus:
            wait_for_text(driver, "^p palette")  # the footer shows the keys
            Path(args.png).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(args.png)
            focus_field(driver, "gpu_count")
            digits = (["2", "4", "8", "3", "6", "5"] * args.keys)[: args.keys]
            lat = [key_latency(driver, d) for d in digits]
        finally:
            driver.quit()
            served.stop()
    print(f"page load to the plan line in the page: {loaded * 1000:.0f} ms (one app process)")
    print(
        f"key in gpu_count to its plan line in the page: median {statistics.median(lat) * 1000:.0f}"
        f" ms, worst {max(lat) * 1000:.0f} ms ({len(lat)} keys)"
    )
    print(f"screenshot: {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
