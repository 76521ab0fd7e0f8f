"""A real `veri-tui serve` for the web tests and bench_serve.py: started, found, stopped.

The server is the command itself (`python -m veri_tui serve --port 0`: a free loopback
port, read back from the URL it prints once), with its own VERI_HOME and working
directory. `children()` lists the processes it started: one app per browser tab.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


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
        """Pids whose parent is the server: the app processes it started (one per tab)."""
        return children_of(self.proc.pid)

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


def serve_env(home: Path) -> dict[str, str]:
    """This environment with VERI_HOME set, the Hub offline and no token of the user's."""
    env = dict(os.environ, VERI_HOME=str(home), HF_HUB_OFFLINE="1")
    env.pop("VERI_SERVE_TOKEN", None)
    return env


def start_served(root: Path) -> Served:
    """Start the server in `root` (VERI_HOME `root/veri`); returns once it printed its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "veri_tui", "serve", "--port", "0"],
        cwd=root,
        env=serve_env(root / "veri"),
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
