"""Who may reach a served app: the bind address rule, the token, and its check on every request.

textual-serve itself has no authentication, and each websocket it accepts starts an app
process that can launch and cancel jobs as this user, so `veri-tui serve` adds it here:

- it binds 127.0.0.1 by default; an address other machines can reach is refused unless the
  user passes `--allow-remote` and sets the token themselves ($VERI_SERVE_TOKEN);
- a random token (48 hex digits, `secrets`) is printed once in a Jupyter-style URL, and
  every request (page, static file, download) must carry it: `?token=` in the URL or the
  cookie the first page load sets; a token of the user's own ($VERI_SERVE_TOKEN) shorter
  than 24 characters is refused unless they pass `--allow-short-token` (loopback only);
- the websocket, which is what starts an app process, needs more than the cookie: the token
  in its path (`/ws/<token>`) and an `Origin` header naming this server itself. Cookies do
  not tell ports apart (every 127.0.0.1 port is one site to SameSite), so without both a
  page served from any other local port could open the app and type into it;
- anything else gets 403 before a handler runs, so no app process is ever started for it.
  Tokens are compared in constant time (hmac.compare_digest).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from veri_tui.errors import VeriError

TOKEN_ENV = "VERI_SERVE_TOKEN"
MIN_TOKEN_LENGTH = 24
FORBIDDEN = (
    "403 Forbidden: this veri-tui server needs its token; open the URL `veri-tui serve` "
    "printed (http://HOST:PORT/?token=...)\n"
)
WS_FORBIDDEN = (
    "403 Forbidden: the app's websocket opens only from this server's own page (its path "
    "token and a same-origin Origin header); open the URL `veri-tui serve` printed\n"
)
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    """A fresh random token: 24 random bytes as 48 hex digits (URL-safe as is)."""
    return secrets.token_hex(24)


def is_loopback(host: str) -> bool:
    """True when `host` is reachable only from this machine (127.0.0.0/8, ::1, localhost).

    A name is resolved and counts as loopback only if every address it resolves to is;
    `0.0.0.0` and `::` (every interface) are not.
    """
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_bind(
    host: str, port: int, allow_remote: bool, user_token: str | None, allow_short: bool = False
) -> None:
    """Refuse a bind other machines could reach unless both the flag and a token are given,
    and a short token of the user's own unless `allow_short` (loopback only)."""
    if is_loopback(host):
        if user_token and len(user_token) < MIN_TOKEN_LENGTH and not allow_short:
            raise VeriError(
                f"${TOKEN_ENV} is {len(user_token)} characters; a token needs at least "
                f"{MIN_TOKEN_LENGTH} (unset it for a fresh random one, or pass "
                "--allow-short-token to serve on loopback with it anyway)",
                key=TOKEN_ENV,
            )
        return
    if not allow_remote or not user_token:
        missing = "--allow-remote" if not allow_remote else f"${TOKEN_ENV}"
        raise VeriError(
            f"{host} is not a loopback address, so other machines could reach the app; "
            f"tunnel instead (ssh -L {port}:127.0.0.1:{port} THIS-HOST, then serve on "
            f"127.0.0.1), or pass --allow-remote and set ${TOKEN_ENV} (missing: {missing})",
            key="--host",
        )
    if len(user_token) < MIN_TOKEN_LENGTH:
        raise VeriError(
            f"${TOKEN_ENV} is {len(user_token)} characters; a token for a non-loopback bind "
            f"needs at least {MIN_TOKEN_LENGTH} (python -c 'import secrets; "
            "print(secrets.token_hex(24))' makes one)",
            key=TOKEN_ENV,
        )


def cookie_name(token: str) -> str:
    """Cookies do not tell ports apart: a name per token keeps two servers' cookies apart
    (a hash prefix: the name itself says nothing about the token)."""
    return "veri_tui_" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:12]


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison (a mismatch takes as long wherever it is)."""
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def same_origin(origin: str | None, host: str | None) -> bool:
    """True when the `Origin` header names the server the request reached (its `Host`).

    Compared as host and port (a missing port is its scheme's default), not the scheme:
    behind a TLS proxy (jupyter-server-proxy on a hub) the page is https while this server
    is plain http, and the proxy passes the browser's Host and Origin on unchanged.
    """
    if not origin or not host or origin == "null":
        return False
    parts = urlsplit(origin)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False
    try:
        origin_port = parts.port or DEFAULT_PORTS[parts.scheme]
        here = urlsplit(f"{parts.scheme}://{host}")
        host_port = here.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:  # a port that is not a number
        return False
    return (parts.hostname, origin_port) == (here.hostname, host_port)


def websocket_allowed(request: web.Request, token: str) -> bool:
    """The websocket's own rule: its path token (never the cookie) and a same-origin page."""
    return token_matches(request.match_info.get("token"), token) and same_origin(
        request.headers.get("Origin"), request.headers.get("Host")
    )


def token_middleware(token: str) -> Middleware:
    """aiohttp middleware: 403 for any request without the token; the page sets the cookie."""
    cookie = cookie_name(token)

    @web.middleware
    async def require_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.route.name == "websocket":
            if not websocket_allowed(request, token):
                return web.Response(status=403, text=WS_FORBIDDEN)
            return await handler(request)
        from_url = request.query.get("token")
        from_cookie = request.cookies.get(cookie)
        if not (token_matches(from_url, token) or token_matches(from_cookie, token)):
            return web.Response(status=403, text=FORBIDDEN)
        response = await handler(request)
        # The tokened URL stays out of Referer headers and caches.
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if request.path == "/":
            response.headers.setdefault("Cache-Control", "no-store")
            if from_url and not response.prepared:
                response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
        return response

    return require_token


def tunnel_line(port: int) -> str:
    """How to reach a loopback-bound server from another machine (one line)."""
    host = socket.gethostname() or "THIS-HOST"
    return (
        f"from another machine: ssh -L {port}:127.0.0.1:{port} {host}, "
        "then open the URL above there"
    )
