"""Driving the served app in Chromium and reading its screen (web tests, bench_serve.py).

Reading the page: textual.js draws the terminal with xterm.js onto a canvas (WebGL or 2D),
so the DOM holds no text, and xterm's accessibility tree exists only in screen-reader mode,
which the page does not enable. What xterm.js draws comes from its buffer, and its public
API reads it (`terminal.buffer.active.getLine(y).translateToString()`); the page keeps the
Terminal object in a closure, so `HOOK_JS` (run before any page script, through CDP's
Page.addScriptToEvaluateOnNewDocument) notes every object that is assigned a `_core`
property: xterm's Terminal does so in its constructor (`this._core = new CoreTerminal()`).
`screen_text` then reads the rows the user sees, exactly the cells xterm.js renders.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# WebDriver's key codes (selenium's Keys), spelled out so this module imports without it.
TAB, END, BACKSPACE = "\ue004", "\ue010", "\ue003"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# No network but this machine's: no QUIC, background fetches, updates or sync.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)

HOOK_JS = """
window.__veriCores = [];
Object.defineProperty(Object.prototype, '_core', {
  configurable: true,
  set(value) {
    Object.defineProperty(this, '_core', {value, writable: true, configurable: true});
    window.__veriCores.push(this);
  },
});
"""

READ_JS = """
const term = (window.__veriCores || []).find(t => typeof t.loadAddon === 'function' && t.element);
if (!term) return null;
const buf = term.buffer.active, rows = [];
for (let y = 0; y < term.rows; y++) {
  const line = buf.getLine(buf.viewportY + y);
  rows.push(line ? line.translateToString(true) : '');
}
return rows.join('\\n');
"""


def missing_browser() -> list[str]:
    """What is missing to drive Chromium here (empty: everything is installed)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[dev]')")
    return missing


def start_chromium(profile: Path) -> Any:
    """Headless Chromium on a fresh profile, driven by Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK_JS})
    return driver


def new_tab(driver: Any) -> None:
    """Open a tab and switch to it (the hook is per tab: installed here for the new one)."""
    driver.switch_to.new_window("tab")
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK_JS})


def screen_text(driver: Any) -> str | None:
    """The terminal's visible rows as text (None before xterm.js made its terminal)."""
    return driver.execute_script(READ_JS)


def wait_for_text(driver: Any, text: str, polls: int = 1200) -> str:
    """Poll (every 25 ms, a bound on polls) until the screen shows `text`; the screen."""
    screen = None
    for _ in range(polls):
        screen = screen_text(driver)
        if screen and text in screen:
            return screen
        time.sleep(0.025)
    raise AssertionError(f"never saw {text!r} in the page; last screen:\n{screen}")


def focus_field(driver: Any, key: str, tabs: int = 12) -> None:
    """Tab through the form until its help line names `key` (the field has the focus)."""
    for _ in range(tabs):
        type_keys(driver, TAB)
        for _ in range(80):
            if f" {key}: " in (screen_text(driver) or ""):
                return
            time.sleep(0.025)
    raise AssertionError(f"tabbing never reached the {key} field:\n{screen_text(driver)}")


def type_keys(driver: Any, *keys: str) -> None:
    """Keys into the terminal (xterm.js's input element), as a user types them."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea").send_keys(*keys)


def click_terminal(driver: Any) -> None:
    """Click into the terminal, as a user does before typing: the page (and the app) get
    the focus; until then Textual's footer stays empty in the served app."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, ".xterm-screen").click()
