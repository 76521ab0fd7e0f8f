"""`app()` for notebooks: the served app (`veri-tui serve`) in an IFrame.

The kernel starts one `veri-tui serve --port 0` child on 127.0.0.1 the first time `app()`
is called (a free port; the token made here and handed over in $VERI_SERVE_TOKEN, never on
the command line where `ps` shows it) and stops it when the kernel exits. Every IFrame is a
browser tab of that server, so each gets its own app process; the job folders ($VERI_HOME)
are shared with the terminal app and the CLI.

Where the browser can reach the server:
- on JupyterHub ($JUPYTERHUB_SERVICE_PREFIX set), through jupyter-server-proxy at
  `<prefix>proxy/<port>/`: the server is on the hub's node, not the user's machine;
- `proxy=True` (a notebook server with jupyter-server-proxy, not a hub): `/proxy/<port>/`;
- otherwise directly, `http://127.0.0.1:<port>/` (a notebook on this machine).
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
import sys
import threading
from dataclasses import dataclass
from html import escape

from veri_tui.errors import VeriError

HUB_PREFIX_ENV = "JUPYTERHUB_SERVICE_PREFIX"
_server: tuple[subprocess.Popen[str], int, str] | None = None  # (process, port, token)
_lock = threading.Lock()


@dataclass(frozen=True)
class ServedApp:
    """One IFrame of the served app; `url` is what it loads (also fine for a browser tab)."""

    url: str
    width: str = "100%"
    height: int = 640

    def _repr_html_(self) -> str:
        src = escape(self.url, quote=True)
        return (
            f"<iframe src='{src}' width='{escape(self.width, quote=True)}' "
            f"height='{int(self.height)}' style='border:0'></iframe>"
            f"<div style='font-size:12px'>open in a tab: <a href='{src}' target='_blank'>"
            f"{escape(self.url)}</a></div>"
        )


def _start_server() -> tuple[subprocess.Popen[str], int, str]:
    """Start `veri-tui serve --port 0` and read the port from the URL it prints."""
    token = secrets.token_hex(24)
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", "serve", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "VERI_SERVE_TOKEN": token},
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # until "veri-tui serve: http://127.0.0.1:PORT/?token=..."
        if line.startswith("veri-tui serve: http://"):
            break
        seen.append(line.strip())
    else:
        proc.wait()
        raise VeriError(seen[-1] if seen else "veri-tui serve exited", key="app()")
    port = int(line.split("http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    # Keep reading its output so a full pipe never blocks the server.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    atexit.register(proc.terminate)
    return proc, port, token


def server() -> tuple[int, str]:
    """(port, token) of this kernel's server, started on first use (again if it died)."""
    global _server
    with _lock:
        if _server is None or _server[0].poll() is not None:
            _server = _start_server()
        return _server[1], _server[2]


def app_url(port: int, token: str, proxy: bool | None = None) -> str:
    """The URL the notebook's browser opens: via the hub's proxy, the server's, or direct."""
    prefix = os.environ.get(HUB_PREFIX_ENV)
    if prefix:
        return f"{prefix.rstrip('/')}/proxy/{port}/?token={token}"
    if proxy:
        return f"/proxy/{port}/?token={token}"
    return f"http://127.0.0.1:{port}/?token={token}"


def app(width: str = "100%", height: int = 640, proxy: bool | None = None) -> ServedApp:
    """The veri-tui app in an IFrame (display it, or leave it last in a cell).

    `proxy=True` reaches the server through jupyter-server-proxy outside a hub too (a
    notebook server on a remote GPU box whose port you forwarded). Each call is a new tab:
    a new app process on the same job folders.
    """
    port, token = server()
    return ServedApp(app_url(port, token, proxy), width=width, height=height)
