"""The Python stack of a rank that cannot answer the dump request: its process is stopped.

A stopped process (SIGSTOP, state T) runs no thread, so it cannot answer the watchdog's request
(veri_tui/jobfolder/failures/forensics.py), and the hang report would only say that it is stopped.
Its stack is still where it stood. Every rank registers Python's `faulthandler` on `STACK_SIGNAL`
(veri_tui/trainer/forensics.py), writing into `forensics/stack-<r>.txt`, whose first line names the
main thread. For a stopped rank the supervisor sends that signal (it stays pending), then SIGCONT:
the C handler writes every thread's frames as the process resumes, before the main thread has done
more than a few bytecodes, and the supervisor stops the process again at once, as it was, for the
end that follows. No ptrace and no tool on the node: faulthandler is in the standard library, and
the handler runs even when the main thread is inside a collective (a C call).

A process in a debugger's stop (state t) is not continued by SIGCONT: it stays "not available".
Stdlib only.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.layout import FORENSICS

STACK_SIGNAL = signal.SIGUSR2  # unused by the trainer, torch and torchrun's workers
DUMP_WAIT_S = 2.0  # the handler writes in microseconds; this covers a loaded machine


def stack_path(job_dir: Path | str, rank: int) -> Path:
    """`forensics/stack-<r>.txt`: the rank's faulthandler output (first line: main thread)."""
    return Path(job_dir) / FORENSICS / f"stack-{rank}.txt"


def header(main_ident: int) -> str:
    """The file's first line: the main thread's id as faulthandler prints it."""
    return f"main 0x{main_ident:016x}\n"


def parse(text: str, main: str) -> list[list[Any]]:
    """The main thread's frames (outermost first, [file, line, function] each) in
    faulthandler's output ``text``; ``main``: the thread id as `0x...`."""
    frames: list[list[Any]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            if inside:
                break  # the main thread's block ended
            inside = line.split(" (", 1)[0].rsplit(" ", 1)[-1] == main
            continue
        # '  File "/x/trainer/loop.py", line 219 in step'
        if inside and line.startswith('  File "') and '", line ' in line:
            name, rest = line[len('  File "') :].split('", line ', 1)
            num, _, func = rest.partition(" in ")
            if num.strip().isdigit():
                frames.append([name, int(num), func.strip()])
    return frames[::-1]


def read_stopped(
    job_dir: Path, rank: int, pid: int, wait_s: float = DUMP_WAIT_S
) -> list[list[Any]]:
    """The stopped process ``pid``'s main-thread stack (rank ``rank``), read as above; []
    when the rank never registered the handler (the signal would then end it) or nothing
    came within ``wait_s``. The process is stopped again before this returns."""
    path = stack_path(job_dir, rank)
    try:
        first = path.read_text().splitlines()[0]
        before = path.stat().st_size
    except (OSError, IndexError):
        return []
    if not first.startswith("main 0x"):
        return []
    try:
        os.kill(pid, STACK_SIGNAL)  # pending while the process is stopped
        os.kill(pid, signal.SIGCONT)
    except OSError:
        return []
    text, last = "", -1
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            size = path.stat().st_size
            if size > before and size == last:  # grown, and no longer growing
                break
            last = size
        with path.open() as f:
            f.seek(before)
            text = f.read()
    except OSError:
        pass
    finally:
        try:
            os.kill(pid, signal.SIGSTOP)  # as it was: the watchdog ends it next
        except OSError:
            pass
    return parse(text, first.split()[1])
