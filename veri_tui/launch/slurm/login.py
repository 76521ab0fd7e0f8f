"""A Slurm host's login node: the Machine a `SlurmHost` owns, and what it keeps of it.

`LoginNode` is the part of `SlurmHost` (host.py) that is the login node's own, each member
handed to the `Host` it wraps (`LocalHost` for `--slurm local`, `SshHost` for an alias or
user@host[:port]) by name: its commands, files and processes, and the launch steps the job's shared
folder makes the same as a direct job's there (where its files go, staging, the rows of a
preflight). Written out member by member, so what a Slurm host takes from its login node is
this list, typed, and a member the login node lacks is a type error, not an AttributeError
at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from veri_tui.errors import Refusal
from veri_tui.launch.diskcheck import Place
from veri_tui.launch.host import Host, HostFacts, Row
from veri_tui.launch.machine import Result, Stream

if TYPE_CHECKING:
    from veri_tui.launch.jobdata import JobData
    from veri_tui.launch.records import LogLine
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate


class LoginNode:
    """The login node's commands, files and paths, as a `Host` has them."""

    def __init__(self, login_host: Host) -> None:
        self.login_host = login_host

    # -- the Machine: identity, commands, files ---------------------------------------------

    @property
    def python(self) -> str:
        return self.login_host.python

    @property
    def local(self) -> bool:
        return self.login_host.local

    @property
    def address(self) -> str:
        return self.login_host.address

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, stdin: bytes | None = None
            ) -> Result:  # fmt: skip
        return self.login_host.run(argv, timeout=timeout, stdin=stdin)

    def stream(self, argv: Sequence[str]) -> Stream:
        return self.login_host.stream(argv)

    def read_bytes(self, path: str, limit: int, offset: int = 0) -> bytes:
        return self.login_host.read_bytes(path, limit, offset)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.login_host.write_atomic(path, data)

    def append(self, path: str, data: bytes) -> None:
        self.login_host.append(path, data)

    def exists(self, path: str) -> bool:
        return self.login_host.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.login_host.is_dir(path)

    def listdir(self, path: str) -> list[str]:
        return self.login_host.listdir(path)

    def makedirs(self, path: str) -> None:
        self.login_host.makedirs(path)

    def remove(self, path: str) -> None:
        self.login_host.remove(path)

    def rename(self, src: str, dst: str) -> None:
        self.login_host.rename(src, dst)

    def places(self, paths: Sequence[str]) -> list[Place]:
        return self.login_host.places(paths)

    def start_detached(self, argv: Sequence[str], log: str, cwd: str) -> int:
        return self.login_host.start_detached(argv, log, cwd)

    def alive(self, pid: int) -> bool:
        return self.login_host.alive(pid)

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: object) -> Iterator[LogLine]:  # fmt: skip
        return self.login_host.follow(path, pid, offset, done, **options)

    def close(self) -> None:
        self.login_host.close()

    # -- the job's folder on the shared filesystem: as a direct job's on the login node -----

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig:
        return self.login_host.output_for(job, facts)

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]:  # fmt: skip
        return self.login_host.job_paths(job, plan, job_dir, facts)

    def stage(self, job: JobConfig, tmp: str) -> None:
        self.login_host.stage(job, tmp)

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]:  # fmt: skip
        return self.login_host.path_rows(job, paths, label)

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
        return self.login_host.capacity(facts, plan, disk, output, label)

    def tail_rows(self) -> list[Row]:
        return self.login_host.tail_rows()
