"""The SSH target: the local target's methods (docs/jobs.md), run against a remote job folder.

State is read from the remote job folder over SFTP (job.json, supervisor.pid, log.txt) and
judged by the one lost rule (jobfolder.lost); the log is followed with the resumable tail;
cancel and resume run `python -m jobfolder cancel|resume` on the host with the job's
uploaded package (the supervisor ends every rank, or the host ends them itself when it is
gone); resume then starts the job's supervisor again. Every command is an argument list
quoted with shlex.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

from jobfolder.layout import JOB_FILE, SUPERVISOR_PID
from jobfolder.lost import judge
from jobfolder.procs import GRACE_S
from jobfolder.record import JobRecord
from jobfolder.status import outcome_recorded
from veri_tui.errors import VeriError
from veri_tui.launch.records import LogLine, wait_until_ended
from veri_tui.launch.ssh import files, registry
from veri_tui.launch.ssh.connection import Connection, ConnectionLost, command_line
from veri_tui.launch.ssh.files import package_dir
from veri_tui.launch.ssh.tail import follow_remote

MAX_LOG_READ = 64 * 2**20


class RemoteTarget:
    """Jobs on one SSH host; connects on first use and reconnects after a drop."""

    def __init__(self, host: str, *, trust: str | None = None, conn: Connection | None = None):
        self.host = host
        self.name = f"ssh:{host}"
        self.trust = trust
        self._conn = conn

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = Connection.open(self.host, trust=self.trust)
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

    def _job(self, job_id: str) -> registry.RegistryEntry:
        job = registry.load(job_id)
        if job is None or job.host != self.host:
            raise VeriError(f"no job {job_id} on {self.host}; `veri-tui jobs` lists them", "job")
        return job

    def _supervisor_pid(self, job: registry.RegistryEntry) -> int | None:
        """The pid the supervisor wrote itself, else the one `echo $!` reported at start."""
        try:
            raw = files.read_bytes(self.conn.sftp(), f"{job.job_dir}/{SUPERVISOR_PID}", 64)
            return int(raw.split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return job.pid

    def _alive(self, pid: int) -> bool:
        return self.conn.run(["kill", "-0", str(pid)]).exit_status == 0

    def _jobfolder(self, job: registry.RegistryEntry, *args: str) -> list[str]:
        """`python -m jobfolder ARGS` on the host, with the job's uploaded package. A folder
        uploaded by a release before the package existed gets it now (its pkg/ held only the
        trainer)."""
        pkg = posixpath.join(job.job_dir, "pkg")
        sftp = self.conn.sftp()
        if not files.exists(sftp, posixpath.join(pkg, "jobfolder", "__init__.py")):
            files.upload_package(sftp, package_dir("jobfolder"), posixpath.join(pkg, "jobfolder"))
        return ["env", f"PYTHONPATH={pkg}", job.python, "-m", "jobfolder", *args]

    def get_job(self, job_id: str) -> JobRecord:
        """The remote job.json now, with a vanished supervisor reported as a lost job."""
        job = self._job(job_id)
        path = f"{job.job_dir}/{JOB_FILE}"
        try:
            record = files.read_json(self.conn.sftp(), path)
        except FileNotFoundError:
            raise VeriError(f"{path} is gone from {self.host}", key="job") from None
        record = judge(
            record,
            self._supervisor_pid(job),
            self._alive,
            lambda: files.read_json(self.conn.sftp(), path),
            where=self.host,
        )
        record["host"] = self.host
        job.record = record
        self._save(job)
        return record

    def _save(self, job: registry.RegistryEntry) -> None:
        """Keep the record last read (a multi-node job's nodes leave that to the job)."""
        registry.save(job)

    def list_jobs(self) -> list[JobRecord]:
        """This machine's jobs on this host, newest first."""
        return [self.get_job(j.job_id) for j in registry.all_jobs() if j.host == self.host]

    def read_log(self, job_id: str, offset: int = 0) -> bytes:
        """The rank-0 log from byte `offset` to its current end (b"" before it exists)."""
        job = self._job(job_id)
        try:
            return files.read_bytes(
                self.conn.sftp(), f"{job.job_dir}/log.txt", MAX_LOG_READ, offset
            )
        except FileNotFoundError:
            return b""

    def follow_log(self, job_id: str, offset: int = 0, **tail_options: Any) -> Iterator[LogLine]:
        """Complete log lines from `offset` until the job ends; survives dropped connections."""
        job = self._job(job_id)
        return follow_remote(
            self.conn, f"{job.job_dir}/log.txt", self._supervisor_pid(job), offset, **tail_options
        )

    def wait(self, job_id: str, poll_s: float = 1.0) -> JobRecord:
        """Block until the job has ended; returns its final record."""
        return wait_until_ended(lambda: self.get_job(job_id), poll_s)

    def plan_for_resume(self, job: Any) -> tuple[Any, Any]:
        """(job, plan) as `launch --host` plans: the host's preflight (its GPUs, the model's
        headers read there), every problem refused."""
        from veri_tui.launch.ssh.launch import plan_for_host, preflight_job

        pf = preflight_job(self.conn, job)
        pf.check()
        return plan_for_host(job, pf)

    def resume(self, job_id: str, spec: dict[str, Any] | None = None) -> JobRecord:
        """A new attempt of the ended remote job in its folder (the uploaded trainer's
        `prepare_resume`), then its supervisor started detached; the registry keeps the
        new pid. ``spec`` replaces the job's spec (a re-plan)."""
        record = self.prepare_resume(job_id, spec)
        self.start(job_id)
        return record

    def prepare_resume(
        self, job_id: str, spec: dict[str, Any] | None = None, choice: dict[str, Any] | None = None
    ) -> JobRecord:
        """The job made `pending` for its next attempt on the host, starting nothing;
        ``choice``: a multi-node launcher's step (jobfolder.attempts.prepare_resume)."""
        job = self._job(job_id)
        more = ["--choice", json.dumps(choice)] if choice else []
        argv = self._jobfolder(job, "resume", f"{job.job_dir}/{JOB_FILE}", *more)
        res = self.conn.run_line(command_line(argv), timeout=60, stdin=json.dumps(spec).encode())
        if res.exit_status != 0:
            text = res.text.strip().splitlines()[-1] if res.text.strip() else ""
            key, _, message = text.removeprefix("error: ").partition(": ")
            if res.exit_status == 3 and message:
                raise VeriError(message, key=key)
            raise VeriError(f"resume on {self.host} failed: {res.error_line()}", key="job")
        job.record = json.loads(res.text)
        self._save(job)
        return job.record

    def start(self, job_id: str) -> int:
        """Start the job's supervisor detached again (after `prepare_resume`); its pid."""
        from veri_tui.launch.ssh.launch import start_supervisor

        job = self._job(job_id)
        job.pid = start_supervisor(self.conn, job.job_dir, job.python)
        self._save(job)
        return job.pid

    def append_log(self, job_id: str, line: str) -> None:
        """Add a line to the job's log (once its supervisor has ended: no writer races it)."""
        job = self._job(job_id)
        try:
            with self.conn.sftp().open(f"{job.job_dir}/log.txt", "a") as fh:
                fh.write((line + "\n").encode())
        except OSError:
            pass  # the log says less; the record still tells the outcome

    def cancel(self, job_id: str, grace: float = GRACE_S) -> JobRecord:
        """Cancel on the host (`python -m jobfolder cancel`: the supervisor ends every rank,
        or the host ends them itself when it is gone); the record after."""
        job = self._job(job_id)
        record = self.get_job(job_id)
        if outcome_recorded(record):
            return record
        argv = self._jobfolder(job, "cancel", f"{job.job_dir}/{JOB_FILE}", "--grace", str(grace))
        argv += ["--pid", str(job.pid)] if job.pid else []
        res = self.conn.run_line(command_line(argv), timeout=grace + 60)
        if res.exit_status != 0:
            raise VeriError(f"cancel on {self.host} failed: {res.error_line()}", key="job")
        return self.get_job(job_id)
