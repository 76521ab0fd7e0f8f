"""The served app processes: one per websocket, tied to the server's life.

textual-serve's AppService starts `sh -c COMMAND` and, on stop, sends the app a quit message
and waits for it with no bound. veri-tui's subclass changes what a server that can be
killed needs:

- the app is started without a shell (argv, so the process the server starts is the app
  itself) and, on Linux, with a parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGTERM)`
  through ctypes, in the child before exec): a server killed with SIGKILL, which runs no
  clean-up of its own, still takes every app process with it. The child checks its parent
  after setting it, since a parent that died first would never send the signal;
- `end()` asks the app to quit and waits for it to exit, at most `QUIT_TIMEOUT_S` in all,
  then kills it: a stuck app (or one blocked writing to a closed websocket's pipe) cannot
  hold the server's stop. An app that quit is waited for, not killed: it closes its output
  before its interpreter has finished exiting, and killing it then was what made asyncio
  log `Unknown child process pid N, will report returncode 255` (subprocess's kill() polls
  first, and its waitpid took the exit status from asyncio's child watcher).
- the kill is `os.kill`, never `Popen.kill`/`send_signal`, for the same reason: only the
  child watcher may reap the app (a signal to an exited, unreaped app is harmless).
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
        """Ask the app to quit and wait for its exit; kill it if it has not exited within
        QUIT_TIMEOUT_S (the asking and the waiting together)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIT_TIMEOUT_S
        try:
            await asyncio.wait_for(self.stop(), QUIT_TIMEOUT_S)
        except (TimeoutError, ConnectionError, RuntimeError):
            pass
        process = self._process
        if process is None:
            return
        # Its output ended; its exit follows, which the child watcher reaps and reports.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), max(0.0, deadline - loop.time()))
        if process.returncode is None:
            self.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), QUIT_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL the app process if it is still running (the last resort of a stop), with
        os.kill: Popen.kill would poll it first and could reap it under asyncio's child
        watcher (which then reports returncode 255 and logs an unknown child)."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
