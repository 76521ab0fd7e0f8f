"""This machine as a `Machine` (machine.py): commands through subprocess, files in place.

Whole files are written through jobfolder's atomic writer. A process is started in its own
session (setsid), stdin from /dev/null and output to a file, so it outlives the CLI or app
that started it and ignores the SIGHUP of a closing terminal (torchrun dies on SIGHUP even
under nohup: field notes); this process polls the ones it started, so a long-lived launcher
(the app) reaps them instead of collecting zombies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from veri_tui.jobfolder.contract.atomic import write_bytes_atomic
from veri_tui.jobfolder.contract.procs import pid_alive
from veri_tui.launch.diskcheck import Place, local_place
from veri_tui.launch.loglines import LogLine, follow_lines
from veri_tui.launch.machine import Result

# Processes this process started: polled so that a long-lived launcher (the app) reaps them.
_children: list[subprocess.Popen[bytes]] = []


def reap() -> None:
    """Forget (and reap) the processes this process started that have exited."""
    _children[:] = [p for p in _children if p.poll() is None]


class _Lines:
    """A local command's stdout, line by line (a `Stream`)."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True)

    def readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


class LocalMachine:
    """This machine."""

    name = "local"
    where = "this machine"
    local = True
    address = "127.0.0.1"

    def __init__(self) -> None:
        self.python = sys.executable

    # -- commands and processes ------------------------------------------------------------

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bytes | None = None
            ) -> Result:  # fmt: skip
        done = subprocess.run(list(argv), input=stdin or b"", capture_output=True,
                              timeout=timeout, check=False)  # fmt: skip
        return Result(done.returncode, done.stdout, done.stderr)

    def stream(self, argv: Sequence[str]) -> _Lines:
        return _Lines(argv)

    def start_detached(self, argv: Sequence[str], log: str, cwd: str) -> int:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=cwd, start_new_session=True,
            )  # fmt: skip
        reap()
        _children.append(proc)
        return proc.pid

    def alive(self, pid: int) -> bool:
        reap()
        return pid_alive(pid)

    # -- files -----------------------------------------------------------------------------

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)  # at most what is there: `limit` may be far larger than the file
            return fh.read(max(0, min(limit, os.fstat(fh.fileno()).st_size - offset)))

    def write_atomic(self, path: str, data: bytes) -> None:
        write_bytes_atomic(path, data)

    def append(self, path: str, data: bytes) -> None:
        with open(path, "ab") as fh:
            fh.write(data)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def places(self, paths: Sequence[str]) -> list[Place]:
        return [local_place(p) for p in paths]

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: Any) -> Iterator[LogLine]:  # fmt: skip
        """Complete lines from ``offset`` until ``done()`` and the file is drained."""

        def read(off: int) -> bytes:
            try:
                return self.read_bytes(path, 1 << 40, off)
            except FileNotFoundError:
                return b""

        return follow_lines(read, done, offset, float(options.get("poll_s", 0.2)))

    def close(self) -> None:
        """Nothing held open."""
