"""A real `veri-tui serve` for the web tests and bench_serve.py: started, found, stopped.

The server is the command itself (`python -m veri_tui serve --port 0`: a free loopback
port, read back from the URL it prints once), with its own VERI_HOME and working
directory. `children()` lists the processes it started: one app per browser tab. `Tab` is
a websocket client that stands in for a browser tab where a browser is not needed.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp


@dataclass
class Served:
    """The running server: its printed URL (with the token) and its process."""

    url: str
    proc: subprocess.Popen
    home: Path

    @property
    def base(self) -> str:
        return self.url.split("/?token=", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    def children(self) -> set[int]:
        """The app processes the server started (one per tab): its children but the one
        `veri-tui plan` it runs at its start for the pages (veri_tui/web/opening.py)."""
        return {pid for pid in children_of(self.proc.pid) if not _runs_plan(pid)}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def children_of(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a process that ended meanwhile
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _runs_plan(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # ended meanwhile: not a running app either
    return argv[-2:] == [b"plan", b""]


def serve_env(home: Path) -> dict[str, str]:
    """This environment with VERI_HOME set, the Hub offline and no token of the user's."""
    env = dict(os.environ, VERI_HOME=str(home), HF_HUB_OFFLINE="1")
    env.pop("VERI_SERVE_TOKEN", None)
    return env


def start_served(
    root: Path, args: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> Served:
    """Start the server in `root` (VERI_HOME `root/veri`); returns once it printed its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", "serve", "--port", "0", *args],
        cwd=root,
        env={**serve_env(root / "veri"), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    url = lines[0].removeprefix("veri-tui serve: ").strip()
    if not (url.startswith("http://127.0.0.1:") and "/?token=" in url):
        proc.kill()
        raise AssertionError(f"veri-tui serve did not print its URL: {lines}")
    assert lines[1].startswith("from another machine: ssh -L "), lines
    return Served(url, proc, root / "veri")


class Tab:
    """A websocket client standing in for a browser tab: it sends the page's Origin, reads
    whatever the app sends until the server closes, and answers the close (as a browser's
    websocket does). Runs in its own thread with its own event loop."""

    def __init__(self, served: Served) -> None:
        self.url = served.base.replace("http://", "ws://") + f"/ws/{served.token}"
        self.origin = served.base
        self.received = 0
        self.close_code: int | None = None
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async with session.ws_connect(self.url, origin=self.origin) as ws:
                    self.opened.set()
                    async for message in ws:
                        if message.type == aiohttp.WSMsgType.BINARY:
                            self.received += len(message.data)
                    self.close_code = ws.close_code
        finally:
            self.opened.set()
            self.ended.set()


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `predicate` every 0.1 s; AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """True while `pid` is a process that has not ended (a zombie counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
