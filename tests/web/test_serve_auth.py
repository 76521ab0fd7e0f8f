"""`veri-tui serve`'s guard, against the real server: the token or 403, and the bind rule.

Every route (page, static files, websocket, downloads, unknown paths) answers 403 without
the token and no app process starts; the first tokened page load sets an HttpOnly cookie
that then stands in for the token, except on the websocket, which needs its path token and
a same-origin Origin (a page on another 127.0.0.1 port, or the cookie alone, is refused);
a non-loopback bind without `--allow-remote` and $VERI_SERVE_TOKEN, and a short token of
the user's own, are refused in one line, exit 2, before anything listens.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from support.served import serve_env, start_served

from veri_tui.web.auth import cookie_name, is_loopback, same_origin, token_matches

pytestmark = pytest.mark.timeout(120)


def status(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), dict(err.headers)


async def ws_status(url: str, headers: dict[str, str] | None = None) -> int:
    """The HTTP status a websocket upgrade to `url` gets (101 when it is accepted)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        try:
            async with session.ws_connect(url, headers=headers):
                return 101
        except aiohttp.WSServerHandshakeError as err:
            return err.status


def test_every_route_is_403_without_the_token_and_starts_no_app(served) -> None:
    before = served.children()
    wrong = "f" * len(served.token)
    for path in (
        "/",
        f"/?token={wrong}",
        "/?token=",
        "/static/js/textual.js",
        f"/static/js/textual.js?token={wrong}",
        "/download/anything",
        "/no-such-page",
    ):
        code, body, _ = status(served.base + path)
        assert code == 403, path
        assert "needs its token" in body
        assert "textual" not in body.lower()  # nothing of the page leaks
    ws = served.base.replace("http://", "ws://")
    for path in (f"/ws/{wrong}", "/ws/", f"/ws/x?token={wrong}"):
        assert asyncio.run(ws_status(ws + path)) in (403, 404), path
    code, _, _ = status(served.base + "/", {"Cookie": f"veri_tui_x={served.token}"})
    assert code == 403  # the token under another cookie name is not the cookie
    time.sleep(0.5)  # an app process would have been started by now
    assert served.children() - before == set()


def test_the_tokened_page_sets_a_cookie_that_then_opens_the_rest(served) -> None:
    code, body, headers = status(served.url)
    assert code == 200
    assert f"static/js/textual.js?token={served.token}" in body
    assert "fonts.googleapis.com" not in body  # nothing fetched from outside
    assert headers["Referrer-Policy"] == "no-referrer"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    pair = cookie.split(";", 1)[0]
    code, _, _ = status(served.base + "/static/css/xterm.css", {"Cookie": pair})
    assert code == 200


def test_the_websocket_needs_its_path_token_and_this_servers_origin(served) -> None:
    """What a page from another local port (or any page holding only the cookie) can send:
    the cookie rides along (every 127.0.0.1 port is one site), the Origin is its own."""
    before = served.children()
    port = int(served.base.rsplit(":", 1)[1])
    cookie = f"{cookie_name(served.token)}={served.token}"
    ws = served.base.replace("http://", "ws://") + "/ws/"
    refused = {
        "another port's page": (served.token, f"http://127.0.0.1:{port + 1}", cookie),
        "another host's page": (served.token, f"http://evil.example:{port}", cookie),
        "an opaque origin": (served.token, "null", cookie),
        "no Origin at all": (served.token, None, cookie),
        "the cookie alone": ("0" * len(served.token), served.base, cookie),
        "the cookie, no path token": ("", served.base, cookie),
    }
    for why, (path_token, origin, cookie_header) in refused.items():
        headers = {"Cookie": cookie_header}
        if origin is not None:
            headers["Origin"] = origin
        assert asyncio.run(ws_status(ws + path_token, headers)) in (403, 404), why
    time.sleep(0.5)  # an app process would have been started by now
    assert served.children() - before == set()


def test_same_origin_compares_host_and_port() -> None:
    assert same_origin("http://127.0.0.1:8710", "127.0.0.1:8710")
    assert same_origin("https://hub.example", "hub.example")  # a TLS proxy: default ports
    assert same_origin("https://hub.example:443", "hub.example")
    assert not same_origin("http://127.0.0.1:8711", "127.0.0.1:8710")
    assert not same_origin("http://localhost:8710", "127.0.0.1:8710")
    assert not same_origin("http://127.0.0.1", "127.0.0.1:8710")
    assert not same_origin("null", "127.0.0.1:8710") and not same_origin(None, "x")
    assert not same_origin("file:///x", "127.0.0.1:8710")
    assert not same_origin("http://127.0.0.1:x", "127.0.0.1:8710")


def test_a_short_token_of_the_users_own_needs_the_flag(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "veri_tui", "serve", "--port", "0"],
        env={**serve_env(tmp_path), "VERI_SERVE_TOKEN": "x" * 23},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: VERI_SERVE_TOKEN: "), lines
    assert "23 characters" in lines[0] and "--allow-short-token" in lines[0]
    served = start_served(
        tmp_path, ("--allow-short-token",), {"VERI_SERVE_TOKEN": "x" * 23}
    )  # asked for: it serves, with that token
    try:
        assert served.token == "x" * 23
        assert status(served.url)[0] == 200
    finally:
        served.stop()


def test_a_non_loopback_bind_is_refused_in_one_line(tmp_path) -> None:
    cases = [
        (["--host", "0.0.0.0"], {}, "--allow-remote"),
        (["--host", "0.0.0.0", "--allow-remote"], {}, "$VERI_SERVE_TOKEN"),
        (["--host", "0.0.0.0", "--allow-remote"], {"VERI_SERVE_TOKEN": "short"}, "at least 24"),
    ]
    for args, extra, why in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "veri_tui", "serve", "--port", "0", *args],
            env={**serve_env(tmp_path), **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and why in lines[0], lines
        assert lines[0].startswith(("error: --host: ", "error: VERI_SERVE_TOKEN: "))


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.1") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert token_matches("abc", "abc") and not token_matches("abd", "abc")
    assert not token_matches("", "abc") and not token_matches(None, "abc")
    assert not token_matches("\u00e9" * 3, "abc")
