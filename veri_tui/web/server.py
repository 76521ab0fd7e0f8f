"""`veri-tui serve`: the Textual app in a browser, through textual-serve, behind a token.

textual-serve's `Server` does the work that matters: each websocket (each browser tab) gets
its own app process (`python -m veri_tui` under Textual's web driver) and its output is
relayed to xterm.js in the page; its JS and fonts ship in the wheel, so nothing is fetched
from the internet. This subclass changes what a public server would need:

- every route sits behind the token middleware (veri_tui.web.auth); the websocket's path
  carries the token (`/ws/<token>`), since a notebook's IFrame may not get the cookie;
- the page is veri-tui's own template: relative URLs only (so it also works under a
  jupyter-server-proxy prefix), the bundled Roboto Mono instead of Google's font CSS;
- it binds the socket itself (port 0 picks a free one) and prints the URL once;
- until a tab's app has drawn, its page shows the plan the app opens on (planned once, at
  the start, by `veri-tui plan` itself: veri_tui.web.opening), not only "starting the app";
- it keeps the open websockets and their apps (veri_tui.web.apps), so a stop closes every
  tab's websocket (going away) and ends every app within a bound, instead of aiohttp
  waiting out its handlers' shutdown timeout; apps also die with a killed server.

App processes inherit this process's environment less the token, and its working directory
and VERI_HOME: the job folders stay the one state every tab and the terminal app share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import WSCloseCode, web
from textual_serve.server import Server, to_int

from veri_tui.web.apps import VeriAppService
from veri_tui.web.auth import TOKEN_ENV, token_middleware, tunnel_line
from veri_tui.web.opening import lines_for_page, opening_lines

TEMPLATES = Path(__file__).parent / "templates"
APP_ARGV = [sys.executable, "-m", "veri_tui"]
HANDLERS_TIMEOUT_S = 5.0  # what aiohttp waits for handlers after the apps were told to quit


class VeriServer(Server):
    """textual-serve's Server with the token on every route and veri-tui's own page."""

    def __init__(self, host: str, port: int, token: str, argv: list[str] | None = None) -> None:
        self.argv = list(argv or APP_ARGV)
        super().__init__(shlex.join(self.argv), host=host, port=port, title="veri-tui")
        self.token = token
        self.open: dict[web.WebSocketResponse, VeriAppService] = {}
        self.opening: asyncio.Task[list[str]] | None = None  # veri_tui/web/opening.py

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[token_middleware(self.token)])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
        app.add_routes(
            [
                web.get("/", self.handle_index, name="index"),
                web.get("/ws/{token}", self.handle_websocket, name="websocket"),
                web.get("/download/{key}", self.handle_download, name="download"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        app.on_shutdown.append(self.close_all)
        return app

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One tab: its own app process, relayed until either side closes."""
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        await websocket.prepare(request)
        service = VeriAppService(
            self.argv,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=websocket.close,
            download_manager=self.download_manager,
            debug=self.debug,
        )
        self.open[websocket] = service
        try:
            await service.start(width, height)
            await self._process_messages(websocket, service)
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            self.open.pop(websocket, None)
            await service.end()
            await websocket.close()
        return websocket

    async def close_all(self, app: web.Application | None = None) -> None:
        """On stop: close every tab's websocket and end its app, all at once."""
        pairs = list(self.open.items())
        await asyncio.gather(
            *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopping") for ws, _ in pairs),
            *(service.end() for _, service in pairs),
            return_exceptions=True,
        )

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """The page: xterm.js and textual.js, pointed at this server's websocket."""
        try:
            font_size = int(request.query.get("fontsize", "16"))
        except ValueError:
            font_size = 16
        opening = "\n".join(await lines_for_page(self.opening))
        return {"token": self.token, "font_size": font_size, "title": self.title,
                "opening": opening}  # fmt: skip

    async def start(self) -> web.AppRunner:
        """Bind and start serving; `self.port` becomes the bound port (port 0: a free one)."""
        runner = web.AppRunner(
            await self._make_app(), handle_signals=False, shutdown_timeout=HANDLERS_TIMEOUT_S
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = int(runner.addresses[0][1])
        # The plan the apps open on, for the pages' first paint (planned beside the start).
        self.opening = asyncio.create_task(opening_lines(self.argv))
        return runner

    def url(self) -> str:
        """The one URL that opens the app (printed once)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}/?token={self.token}"


def serve(host: str, port: int, token: str, loopback: bool) -> int:
    """Serve until SIGINT/SIGTERM; prints the URL (and the ssh -L line) once. Exit status."""
    logging.basicConfig(level=logging.WARNING, format="veri-tui serve: %(message)s")
    os.environ.pop(TOKEN_ENV, None)  # app processes inherit the environment: not the token
    server = VeriServer(host, port, token)

    async def main() -> None:
        runner = await server.start()
        print(f"veri-tui serve: {server.url()}", flush=True)
        if loopback:
            print(tunnel_line(server.port), flush=True)
        else:
            print("warning: plain HTTP: the token crosses the network unencrypted", flush=True)
        print("each browser tab runs its own app; ctrl+c stops the server", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            # on_shutdown (close_all) closes every websocket and ends its app first; aiohttp
            # itself closes no websocket and would wait its timeout for their handlers.
            await runner.cleanup()
            if server.opening is not None and not server.opening.done():
                server.opening.cancel()  # its `veri-tui plan` is killed, not left behind
                with contextlib.suppress(asyncio.CancelledError):
                    await server.opening

    asyncio.run(main())
    return 0
