"""A machine reached over SSH as a `Host` (veri_tui/launch/host.py).

Commands run on a channel each, built only from argument lists (`command_line`); files go
over SFTP (bounded reads, writes aside and `posix_rename`d into place: files.py); the log is
followed with the resumable `tail -F` (tail.py). A job's folder on the host holds what it
needs there: the packages the host runs (`pkg/trainer`, `pkg/jobfolder`, on PYTHONPATH), the
dataset (`data/`), and the bundled model when no --model was given (`model/`). The facts
come from one probe script (preflight.py); the model is found and counted over SFTP.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.datasource import files_of
from veri_tui.launch.diskcheck import Place
from veri_tui.launch.host import HostFacts, Row, capacity_rows
from veri_tui.launch.jobdata import JobData, local_data
from veri_tui.launch.machine import Result
from veri_tui.launch.records import LogLine
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection, ConnectionLost, command_line
from veri_tui.launch.ssh.preflight import DISK_SCRIPT, remote_python, run_preflight
from veri_tui.launch.ssh.remote_model import expand_home
from veri_tui.launch.ssh.tail import follow_remote

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate


class _Channel:
    """A remote command's stdout, line by line (a `Stream`)."""

    def __init__(self, conn: Connection, argv: Sequence[str]) -> None:
        self.chan = conn.exec_channel(command_line(list(argv)))
        self.lines = self.chan.makefile("r")

    def readline(self) -> str:
        return str(self.lines.readline())

    def close(self) -> None:
        self.chan.close()


class SshHost:
    """One SSH destination; connects on first use and reconnects after a drop."""

    kind = "ssh"
    local = False

    def __init__(self, name: str, *, trust: str | None = None, conn: Connection | None = None,
                 python: str | None = None) -> None:  # fmt: skip
        self.name = name
        self.label: str | None = name
        self.where = name
        self.trust = trust
        self.python = python or remote_python()
        self._conn = conn
        self._code_checked: set[str] = set()

    @classmethod
    def open(cls, name: str, *, trust: str | None = None) -> SshHost:
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

    # -- the job's steps ---------------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """The host's facts for ``job``: its model, its gpu_count, and whether the artifact is
        a whole model (a full fine-tune: the disk must hold it) or an adapter."""
        return run_preflight(
            self.conn,
            model=job.model,
            gpu_count=int(job.gpu_count),
            full_finetune=not job.hyperparameters.lora_rank,
            dataset_bytes=dataset_bytes,
            report_to=job.hyperparameters.report_to,
        )

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]:
        """The job as it will run on the host (its detected GPU with its real memory) and its
        plan, from the model's headers read there, calibrated by this host's runs; a plan made
        elsewhere (``given``) is not used."""
        from veri_tui.plan import plan_job, read_model_info

        if facts.gpu_name:
            job = job.model_copy(update={"gpu": facts.gpu_name})
        info = facts.model_info if facts.model_info is not None else read_model_info(None)
        return job, plan_job(job, info, host=facts.host)

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig:
        """The output dir is a path on the host: `~` expanded there, refused when not empty."""
        if not job.output:
            return job
        output = expand_home(job.output, facts.home)
        if not output.startswith("/"):
            raise VeriError(f"{job.output}: give an absolute or ~/ path on {facts.host}",
                            key="output")  # fmt: skip
        if self.exists(output) and (not self.is_dir(output) or self.listdir(output)):
            raise VeriError(f"{output} already exists on {facts.host} and is not empty; "
                            "choose another --output", key="output")  # fmt: skip
        return job.model_copy(update={"output": output})

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]:  # fmt: skip
        """(model path, datasets, output dir, the model's name) in the host's job folder."""
        model = facts.model_path or posixpath.join(job_dir, "model")
        dataset = uploaded(local_data(job), job_dir)
        output = job.output or posixpath.join(job_dir, "output")
        return model, dataset, output, job.model or "tiny-model (bundled)"

    def stage(self, job: JobConfig, tmp: str) -> None:
        """Copy into the folder being built what the job needs on the host."""
        sftp = self.conn.sftp()
        files.upload_code(sftp, posixpath.join(tmp, "pkg"))
        here = local_data(job)
        there = uploaded(here, tmp)
        for src, dst in zip((*here.train, *here.eval), (*there.train, *there.eval), strict=True):
            root = Path(src.path)
            for f in files_of(root):  # a file, or a folder's files (a Hub snapshot's too)
                target = posixpath.join(dst.path, *f.relative_to(root).parts)
                files.makedirs(sftp, posixpath.dirname(target))
                files.upload_file(sftp, f, target)
        if not job.model:
            from veri_tui.plan.sources import bundled_tiny_model

            files.makedirs(sftp, posixpath.join(tmp, "model"))
            for part in sorted(bundled_tiny_model().iterdir()):
                if part.is_file():
                    files.upload_file(sftp, part, posixpath.join(tmp, "model", part.name))

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]:  # fmt: skip
        """The output dir on the host, when one was given (it was checked there)."""
        return [("output", True, f"{job.output} on {label}")] if job.output else []

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
        """Host memory, then disk, against this host."""
        return capacity_rows(self, facts, plan, disk, output, label)

    def tail_rows(self) -> list[Row]:
        return []  # torch is one of the probe's facts (a problem when missing)

    def pythonpath(self, job_dir: str) -> list[str]:
        """`env PYTHONPATH=<job>/pkg`: the job's uploaded packages. A folder uploaded by a
        release before the packages moved into veri_tui holds them as `pkg/trainer` (and
        `pkg/jobfolder`): it gets this release's `pkg/veri_tui/` now, once per folder, since
        every command this release runs there names the new modules."""
        pkg = posixpath.join(job_dir, "pkg")
        if job_dir not in self._code_checked:
            sftp = self.conn.sftp()
            new = f"{pkg}/veri_tui/jobfolder/__init__.py"
            if files.exists(sftp, pkg) and not files.exists(sftp, new):
                files.upload_code(sftp, pkg)
            self._code_checked.add(job_dir)
        return ["env", f"PYTHONPATH={pkg}"]

    def follow(self, path: str, pid: int | None, offset: int, done: Callable[[], bool],
               **options: Any) -> Iterator[LogLine]:  # fmt: skip
        """The resumable tail of ``path`` until process ``pid`` ends (``done`` is not needed:
        tail ends with the supervisor)."""
        options.pop("poll_s", None)
        return follow_remote(self.conn, path, pid, offset, **options)


def uploaded(data: JobData, job_dir: str) -> JobData:
    """The datasets as the job folder on a host holds them: source k (the mixture's, then
    the eval sources) in `data/<k>/` under its own name."""

    def moved(k: int, src: Any) -> Any:
        return src.moved(posixpath.join(job_dir, "data", str(k), Path(src.path).name))

    train = tuple(moved(k, s) for k, s in enumerate(data.train))
    return JobData(train, tuple(moved(len(train) + k, s) for k, s in enumerate(data.eval)))
