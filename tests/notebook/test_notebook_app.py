"""`veri_tui.notebook.app()`: the served app in an IFrame, from a fresh interpreter (a kernel).

The child calls app() as a notebook cell would and prints the IFrame's HTML; the test
loads the IFrame's URL from the real server it started (200 with the token, 403 without),
checks the hub form of the URL, and that the server ends with the interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser

import pytest
from support.served import serve_env

CHILD = """
import json, sys
from veri_tui.notebook import app
from veri_tui.notebook.served import server
frame = app(height=500)
print(json.dumps({"html": frame._repr_html_(), "url": frame.url, "port": server()[0],
                  "widgets": [m for m in ("ipywidgets", "IPython") if m in sys.modules]}))
sys.stdout.flush()
sys.stdin.readline()  # the test has loaded the page: the kernel exits, the server with it
"""


def frame_src(html: str) -> str:
    found: list[str] = []

    class Frames(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "iframe":
                found.append(dict(attrs)["src"] or "")

    Frames().feed(html)
    (src,) = found
    return src


def fetch(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.mark.timeout(120)
def test_app_is_an_iframe_of_a_server_that_lives_as_long_as_the_kernel(tmp_path) -> None:
    kernel = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=serve_env(tmp_path / "veri"),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert kernel.stdin is not None and kernel.stdout is not None
    shown = json.loads(kernel.stdout.readline())
    src = frame_src(shown["html"])
    assert src == shown["url"] and src.startswith(f"http://127.0.0.1:{shown['port']}/?token=")
    assert "height='500'" in shown["html"]
    assert shown["widgets"] == []
    assert fetch(src) == 200
    assert fetch(src.split("?")[0]) == 403
    kernel.stdin.write("\n")
    kernel.stdin.flush()
    assert kernel.wait(timeout=60) == 0
    with pytest.raises(urllib.error.URLError):
        for _ in range(100):  # the server stops (SIGTERM at exit) within moments
            fetch(src)
            time.sleep(0.1)


def test_on_a_hub_the_url_goes_through_jupyter_server_proxy(monkeypatch) -> None:
    from veri_tui.notebook.served import app_url

    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/ada/")
    assert app_url(8710, "abc") == "/user/ada/proxy/8710/?token=abc"
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX")
    assert app_url(8710, "abc", proxy=True) == "/proxy/8710/?token=abc"
    assert app_url(8710, "abc") == "http://127.0.0.1:8710/?token=abc"
