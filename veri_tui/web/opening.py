"""What a tab's page shows before its app has drawn: the plan the app opens on.

Each tab starts its own app process, which takes a second or more to draw its first frame
(longer on a busy machine); until then the page showed only "starting the app...", which is
also all a headless browser's screenshot, taken at the page's load, ever showed. The server
plans the opening job once, as `veri-tui plan` does, by running that very command
(`python -m veri_tui plan`, the app's own interpreter and working directory: the web side
imports nothing of the planner) when it starts, and the page shows those lines (model,
budget, decision, plan line) under its "starting" line until the app's first frame replaces
the whole page. A plan that fails or is slow leaves the starting line alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

PLAN_TIMEOUT_S = 30.0  # a hang guard for the one `veri-tui plan` run
PAGE_WAIT_S = 5.0  # what a page asked for right after the start waits for those lines


async def opening_lines(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """`veri-tui plan`'s lines up to its plan line ([] if it fails): `argv` runs veri-tui."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, "plan", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=env if env is not None else dict(os.environ),
        )  # fmt: skip
    except OSError:
        return []
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), PLAN_TIMEOUT_S)
    except (TimeoutError, asyncio.CancelledError) as exc:  # a hang, or the server stopping
        with contextlib.suppress(ProcessLookupError):
            # os.kill, not proc.kill(): its poll could reap under asyncio's child watcher
            os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return []
    lines = out.decode("utf-8", "replace").splitlines()
    ends = [i for i, line in enumerate(lines) if line.startswith("plan: ")]
    return lines[: ends[0] + 1] if proc.returncode == 0 and ends else []


async def lines_for_page(task: asyncio.Task[list[str]] | None) -> list[str]:
    """The opening lines for a page: at once when planned, else after at most PAGE_WAIT_S
    (a page right after the start), else none."""
    if task is None:
        return []
    try:
        return await asyncio.wait_for(asyncio.shield(task), PAGE_WAIT_S)
    except TimeoutError:
        return []
