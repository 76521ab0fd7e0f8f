"""A machine reached over SSH as a `Machine` (veri_tui/launch/machine.py).

Commands run on a channel each, built only from argument lists (`command_line`); files go
over SFTP (bounded reads, writes aside and `posix_rename`d into place: files.py); a file is
followed with the resumable `tail -F` (tail.py). It connects on first use and reconnects
after a drop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from veri_tui.errors import VeriError
from veri_tui.launch.diskcheck import Place
from veri_tui.launch.machine import Result
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection, ConnectionLost, command_line
from veri_tui.launch.ssh.preflight import DISK_SCRIPT, remote_python
from veri_tui.launch.ssh.tail import follow_remote

if TYPE_CHECKING:
    from veri_tui.launch.loglines import LogLine


class _Channel:
    """A remote command's stdout, line by line (a `Stream`)."""

    def __init__(self, conn: Connection, argv: Sequence[str]) -> None:
        self.chan = conn.exec_channel(command_line(list(argv)))
        self.lines = self.chan.makefile("r")

    def readline(self) -> str:
        return str(self.lines.readline())

    def close(self) -> None:
        self.chan.close()


class SshMachine:
    """One SSH destination; connects on first use and reconnects after a drop."""

    local = False

    def __init__(self, name: str, *, trust: str | None = None, conn: Connection | None = None,
                 python: str | None = None) -> None:  # fmt: skip
        self.name = name
        self.where = name
        self.trust = trust
        self.python = python or remote_python()
        self._conn = conn

    @classmethod
    def open(cls, name: str, *, trust: str | None = None) -> SshMachine:
        """Connect now (a host that cannot be reached raises VeriError here)."""
        return cls(name, trust=trust, conn=Connection.open(name, trust=trust))

    @property
    def address(self) -> str:
        """The address the other nodes reach this host at (its SSH HostName)."""
        return self.conn.spec.hostname

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = Connection.open(self.name, trust=self.trust)
        else:
            try:
                active = self._conn.transport.is_active()
            except ConnectionLost:
                active = False
            if not active:  # dropped since last use (a frozen one is caught by read timeouts)
                self._conn.reconnect()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- commands and processes ------------------------------------------------------------

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bytes | None = None
            ) -> Result:  # fmt: skip
        return self.conn.run(list(argv), timeout=timeout, stdin=stdin)

    def stream(self, argv: Sequence[str]) -> _Channel:
        return _Channel(self.conn, argv)

    def start_detached(self, argv: Sequence[str], log: str, cwd: str) -> int:
        """`setsid nohup ARGV >log 2>&1 </dev/null & echo $!`: it outlives the session (the
        supervisor sets its torchrun's folder itself)."""
        line = command_line(["setsid", "nohup", *argv])
        res = self.conn.run_line(f"{line} >{command_line([log])} 2>&1 </dev/null & echo $!",
                                 timeout=30)  # fmt: skip
        try:
            return int(res.stdout.split()[-1])
        except (ValueError, IndexError):
            raise VeriError(f"starting the job failed: {res.error_line()}", key="host") from None

    def alive(self, pid: int) -> bool:
        return self.conn.run(["kill", "-0", str(pid)]).exit_status == 0

    # -- files -----------------------------------------------------------------------------

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        return files.read_bytes(self.conn.sftp(), path, limit, offset)

    def write_atomic(self, path: str, data: bytes) -> None:
        files.write_atomic(self.conn.sftp(), path, data)

    def append(self, path: str, data: bytes) -> None:
        with self.conn.sftp().open(path, "a") as fh:
            fh.write(data)

    def exists(self, path: str) -> bool:
        return files.exists(self.conn.sftp(), path)

    def is_dir(self, path: str) -> bool:
        return files.is_dir(self.conn.sftp(), path)

    def listdir(self, path: str) -> list[str]:
        return sorted(self.conn.sftp().listdir(path))

    def makedirs(self, path: str) -> None:
        files.makedirs(self.conn.sftp(), path)

    def remove(self, path: str) -> None:
        self.conn.sftp().remove(path)

    def rename(self, src: str, dst: str) -> None:
        self.conn.sftp().posix_rename(src, dst)

    def places(self, paths: Sequence[str]) -> list[Place]:
        """Free space and filesystem at each path's nearest existing folder, named
        `host:path` (one command for all of them)."""
        res = self.conn.run([self.python, "-c", DISK_SCRIPT, *paths], timeout=60)
        try:
            rows = json.loads(res.stdout.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise VeriError(f"free space on {self.name}: {res.error_line()}", key="disk") from None
        return [Place(f"{self.name}:{path}", int(free), int(dev)) for path, free, dev in rows]

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: Any) -> Iterator[LogLine]:  # fmt: skip
        """The resumable tail of ``path`` until process ``pid`` ends (``done`` is not needed:
        tail ends with the supervisor)."""
        options.pop("poll_s", None)
        return follow_remote(self.conn, path, pid, offset, **options)
