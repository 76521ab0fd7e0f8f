"""`scratch`: a test-only backend, a plugin as another distribution would install one (the
`veri_tui_backends` namespace package, veri_tui/plugins.py). A job runs on this machine in a
scratch folder (`<folder>/jobs/<job id>`), its supervisor started through `setsid`, its handle
the string `setsid:<pid>`; registry entries of kind `scratch` keep the folder as their host.

It gives the four steps of `SupervisedBackend` (start, judge, stop, tail) and the Backend
protocol's declarations; nothing of veri_tui is changed for it. tests/backends/scratch/
conformance.py installs it for the conformance suite.
"""

from __future__ import annotations

import posixpath
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import SUPERVISOR_LOG, SUPERVISOR_PID
from veri_tui.jobfolder.contract.lost import judge as judge_pid
from veri_tui.launch.backends.api import Option
from veri_tui.launch.backends.supervised import SupervisedBackend
from veri_tui.launch.host import run_cancel, supervisor_argv
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.local_machine import LocalMachine

if TYPE_CHECKING:
    from veri_tui.jobfolder.contract.record import JobRecord, JobSpec
    from veri_tui.launch.host import Host
    from veri_tui.launch.loglines import LogLine
    from veri_tui.launch.probe.fleet import ProbeChoice
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig

NO_SCRIPT = "the scratch backend submits no script: a dry run has nothing to print"
# The supervisors started here: polled so that they are reaped once they exit.
_started: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class Scratch:
    """The backend's destination: the scratch folder its jobs run in."""

    folder: str


class ScratchMachine(LocalMachine):
    """This machine, named by the scratch folder (what a registry entry keeps as its host)."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.name = folder


class ScratchHost(LocalHost):
    """This machine's steps (its paths, plan, preflight rows), its jobs in the folder."""

    kind = "scratch"

    def __init__(self, folder: str, python: str | None = None) -> None:
        super().__init__(home=Path(folder))
        self.machine = ScratchMachine(folder)
        if python:
            self.machine.python = python
        self.label = f"scratch:{folder}"


def _pid(node: Node) -> int | None:
    """The supervisor's pid: its own pid file, else the one in the handle."""
    try:
        return int(Path(node.job_dir, SUPERVISOR_PID).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    handle = node.handle or ""
    return int(handle.removeprefix("setsid:")) if handle.startswith("setsid:") else None


class ScratchBackend(SupervisedBackend):
    """Supervisors started through `setsid` in the scratch folder."""

    name = "scratch"
    kinds: tuple[str, ...] = ("scratch",)
    group: str | None = "scratch (a test-only backend)"
    given_as = "--scratch"
    probes_one_host = False
    options: tuple[Option, ...] = (
        Option("scratch", str, "run the job through setsid in this scratch folder",
               metavar="FOLDER"),
    )  # fmt: skip

    def where_from(self, values: Mapping[str, object], table: Mapping[str, object] | None,
                   job: JobConfig | None) -> Scratch | None:  # fmt: skip
        folder = values.get("scratch") or (table or {}).get("folder")
        return Scratch(str(folder)) if folder else None

    def accepts(self, where: object, job: JobConfig | None) -> Scratch | None:
        return where if isinstance(where, Scratch) else None

    def host_names(self, where: Scratch) -> list[str]:
        return [where.folder]

    def open_hosts(self, where: Scratch, trust: str | None) -> list[Host]:
        Path(where.folder).mkdir(parents=True, exist_ok=True)
        return [ScratchHost(where.folder)]

    def reopen(self, host: str, python: str) -> Host:
        return ScratchHost(host, python)

    def label(self, host: str) -> str:
        return f"scratch:{host}"

    def check_dry_run(self) -> None:
        raise VeriError(NO_SCRIPT, key="dry_run")

    def script(self, host: Host, job_dir: str, record: JobRecord) -> str:
        raise VeriError(NO_SCRIPT, key="dry_run")

    def record_probe_mode(self, spec: JobSpec, choice: ProbeChoice) -> None:
        return None

    def refuse_nodes(self, nodes: int | None) -> None:
        if nodes is not None:
            raise VeriError("a scratch job resumes on its own layout", key="nodes")

    def relayout(self, host: Host, record: JobRecord, gpu_count: int | None, nodes: int | None
                 ) -> tuple[int | None, bool]:  # fmt: skip
        return gpu_count, False

    # -- the four steps --------------------------------------------------------------------

    def start(self, host: Host, job_dir: str) -> str:
        """`setsid python -m veri_tui.jobfolder.supervise --job ...`: its own session, so it
        outlives this process; the handle names the pid."""
        _started[:] = [p for p in _started if p.poll() is None]
        with open(posixpath.join(job_dir, SUPERVISOR_LOG), "ab") as log:
            proc = subprocess.Popen(["setsid", *supervisor_argv(host, job_dir)],
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=job_dir)  # fmt: skip
        _started.append(proc)
        return f"setsid:{proc.pid}"

    def judge(self, job: JobTarget, node: Node, record: JobRecord,
              reread: Callable[[], JobRecord]) -> JobRecord:  # fmt: skip
        _started[:] = [p for p in _started if p.poll() is None]
        where = node.host.label or ""
        return judge_pid(record, _pid(node), node.host.machine.alive, reread, where=where)

    def stop(self, job: JobTarget, node: Node, grace: float) -> None:
        run_cancel(node.host, node.job_dir, _pid(node), grace)

    def tail(self, job: JobTarget, node: Node, path: str, offset: int,
             done: Callable[[], bool], **options: object) -> Iterator[LogLine]:  # fmt: skip
        return node.host.machine.follow(path, _pid(node), offset, done, **options)


BACKEND = ScratchBackend()
