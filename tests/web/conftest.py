"""One real `veri-tui serve` and one real headless Chromium for the web tests (session-wide).

The server: tests/support/served.py. Chromium is Debian's (/usr/bin/chromium) driven by
Selenium through Debian's chromedriver, on a fresh profile with everything that would reach
the network switched off (tests/support/browser.py, which also says how the page's text is
read). Without them the browser tests skip with the reason, unless VERI_REQUIRE_CHROMIUM=1
(CI), where they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from support.browser import missing_browser, start_chromium
from support.served import Served, start_served


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`veri-tui serve --port 0` on 127.0.0.1, stopped (SIGTERM) at the end."""
    server = start_served(tmp_path_factory.mktemp("served"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Headless Chromium (Selenium + chromedriver), one for every web test."""
    missing = missing_browser()
    if missing:
        why = f"needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("VERI_REQUIRE_CHROMIUM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    driver = start_chromium(tmp_path_factory.mktemp("chromium"))
    try:
        yield driver
    finally:
        driver.quit()
