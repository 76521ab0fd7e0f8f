"""The served app in a real headless Chromium: tokened page, typing a knob, one app per tab.

The page's text is the xterm.js terminal's buffer (tests/support/browser.py says why and
how). Waits are bounded polls, never timed assertions.
"""

from __future__ import annotations

import pytest
from support.browser import (
    BACKSPACE,
    END,
    focus_field,
    new_tab,
    screen_text,
    type_keys,
    wait_for_text,
)

# slow: a browser and an app process per tab (seconds each); CI's main step runs it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_without_the_token_the_browser_gets_403_and_no_app_starts(served, browser) -> None:
    before = served.children()
    browser.get(served.base + "/")
    assert "403 Forbidden" in browser.page_source
    browser.get(served.base + "/?token=" + "0" * len(served.token))
    assert "403 Forbidden" in browser.page_source
    assert screen_text(browser) is None  # no terminal: textual.js was never served
    assert served.children() - before == set()


OPENING_JS = "const e = document.getElementById('opening'); return e ? e.textContent : null;"


def test_the_first_paint_shows_the_plan_the_app_opens_on(served, browser) -> None:
    """The page as loaded, before its app's first frame (all a headless screenshot showed
    was "starting the app..."): the lines `veri-tui plan` prints down to the plan line.
    `delay=1` makes textual.js wait for its Start button, so no app process starts."""
    for _ in range(60):  # the server plans it once, beside its start: a bound, not a timing
        browser.get(served.url + "&delay=1")
        opening = browser.execute_script(OPENING_JS)
        if opening:
            break
    assert opening, browser.page_source
    before = served.children()
    browser.get(served.url + "&delay=1")  # planned: at once, and still no app
    assert browser.execute_script(OPENING_JS) == opening
    lines = opening.splitlines()
    assert lines[0].startswith("model: tiny-model (bundled): 156,032 parameters")
    assert lines[-1].startswith("plan: dp=1 zero_stage=0 ") and len(lines) == 4
    assert "starting this tab's app" in browser.page_source
    assert served.children() == before


def test_typing_a_knob_shows_the_new_plan_line_in_the_page(served, browser) -> None:
    before = served.children()
    browser.get(served.url)
    screen = wait_for_text(browser, "plan: dp=1 ")
    assert "model tiny-model (bundled)" in screen
    assert len(served.children() - before) == 1  # this tab's own app process
    focus_field(browser, "gpu_count")
    type_keys(browser, END, BACKSPACE)  # the field held "1"
    wait_for_text(browser, " gpu_count           default 1 ")  # empty: its placeholder
    type_keys(browser, "4")
    screen = wait_for_text(browser, "plan: dp=4 ")
    assert "gbs=4" in screen.split("plan: dp=4 ", 1)[1].splitlines()[0]


def test_each_tab_is_its_own_app_process(served, browser) -> None:
    first = browser.current_window_handle
    browser.get(served.url)
    wait_for_text(browser, "plan: dp=1 ")
    apps = served.children()
    new_tab(browser)
    browser.get(served.url)
    wait_for_text(browser, "plan: dp=1 ")  # a fresh app: its own knobs, not the other tab's
    assert len(served.children() - apps) == 1
    browser.close()
    browser.switch_to.window(first)
