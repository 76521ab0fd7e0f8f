"""A Machine: what the launch side needs of one machine's transport, apart from any job policy.

A Machine runs commands (`run`, `stream` for a long-running one), reads and writes files
(`read_bytes`, `write_atomic`, `append`, `exists`, `is_dir`, `listdir`, `makedirs`,
`remove`, `rename`), reports free space (`places`) and runs processes (`start_detached`,
`alive`, `follow` a file while one runs). `LocalMachine` (local_machine.py: this machine,
os and subprocess) and `SshMachine` (ssh/machine.py: paramiko, SFTP for files, a channel
per command quoted with shlex) are the two; a `Host` (host.py), the job policy a backend
runs on a machine, has one (a Slurm host has its login node's). Paths are POSIX strings on
the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from veri_tui.launch.diskcheck import Place

if TYPE_CHECKING:
    from veri_tui.launch.loglines import LogLine


@dataclass(frozen=True)
class Result:
    """What a command returned."""

    exit_status: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    def error_line(self) -> str:
        """The last stderr line: what a one-line failure message should quote."""
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {self.exit_status}"


class Stream(Protocol):
    """A command still running: its stdout line by line, then closed (rendezvous probes)."""

    def readline(self) -> str: ...

    def close(self) -> None: ...


class Machine(Protocol):
    """One machine: its name, commands and files (paths are POSIX strings there)."""

    @property
    def name(self) -> str:
        """`local`, or the SSH destination as the user typed it."""

    @property
    def where(self) -> str:
        """The host in messages: `this machine`, or `name`."""

    @property
    def python(self) -> str:
        """The interpreter that runs the supervisor and `python -m veri_tui.jobfolder` there."""

    @property
    def local(self) -> bool:
        """Whether its paths are this machine's (the job's files are used in place)."""

    @property
    def address(self) -> str:
        """The address the other nodes of a multi-node job reach it at."""

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bytes | None = None
            ) -> Result: ...  # fmt: skip

    def stream(self, argv: Sequence[str]) -> Stream: ...

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes: ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def append(self, path: str, data: bytes) -> None: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...

    def remove(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def places(self, paths: Sequence[str]) -> list[Place]: ...

    # -- processes: what a job's supervisor is, on a machine that runs one ---------------

    def start_detached(self, argv: Sequence[str], log: str, cwd: str) -> int:
        """Start ``argv`` in its own session (it outlives this process), output to ``log``;
        its pid."""

    def alive(self, pid: int) -> bool:
        """Whether process ``pid`` runs there."""

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: object) -> Iterator[LogLine]:  # fmt: skip
        """Complete lines of ``path`` from ``offset`` until process ``pid`` has ended or
        ``done()`` (a tail that survives a dropped connection)."""

    def close(self) -> None: ...
