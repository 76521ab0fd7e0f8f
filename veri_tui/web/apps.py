"""The served app processes: one per websocket, tied to the server's life.

textual-serve's AppService starts `sh -c COMMAND` and, on stop, sends the app a quit message
and waits for it with no bound. veri-tui's subclass changes what a server that can be
killed needs:

- the app is started without a shell (argv, so the process the server starts is the app
  itself) and, on Linux, with a parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGTERM)`
  through ctypes, in the child before exec): a server killed with SIGKILL, which runs no
  clean-up of its own, still takes every app process with it. The child checks its parent
  after setting it, since a parent that died first would never send the signal;
- `end()` asks the app to quit, waits at most `QUIT_TIMEOUT_S`, then kills it: a stuck app
  (or one blocked writing to a closed websocket's pipe) cannot hold the server's stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from asyncio.subprocess import Process

from textual_serve.app_service import AppService

QUIT_TIMEOUT_S = 3.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _prctl() -> object | None:
    """libc's prctl, looked up once here: the child between fork and exec calls only it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


PRCTL = _prctl()


def die_with(parent: int) -> None:
    """preexec_fn: SIGTERM this process when `parent` dies (Linux; a no-op elsewhere)."""
    if PRCTL is None:
        return
    PRCTL(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)  # type: ignore[operator]
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)


class VeriAppService(AppService):
    """One app process for one websocket: started as argv, ended within a bound."""

    def __init__(self, argv: list[str], **kwargs: object) -> None:
        super().__init__(" ".join(argv), **kwargs)  # type: ignore[arg-type]
        self.argv = argv

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        parent = os.getpid()
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height),
            preexec_fn=lambda: die_with(parent),
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    @property
    def pid(self) -> int | None:
        """The app process's pid (None before it started)."""
        return self._process.pid if self._process is not None else None

    async def end(self) -> None:
        """Ask the app to quit; kill it if it has not within QUIT_TIMEOUT_S."""
        try:
            await asyncio.wait_for(self.stop(), QUIT_TIMEOUT_S)
        except (TimeoutError, ConnectionError, RuntimeError):
            pass
        self.kill()
        if self._process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._process.wait(), QUIT_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL the app process if it is still running (the last resort of a stop)."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
