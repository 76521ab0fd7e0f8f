"""The SSH target: the local target's methods (docs/jobs.md), run against a remote job folder.

State is read from the remote job folder over SFTP (job.json, supervisor.pid, log.txt); the
log is followed with the resumable tail; cancel signals the remote supervisor, which ends
every rank, and falls back to ending them itself (with the uploaded trainer.procs code)
when the supervisor is gone; resume prepares a new attempt with the uploaded
trainer.attempts code and starts the job's supervisor again. Every command is an argument
list quoted with shlex.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Iterator
from typing import Any

from trainer.jobdir import JOB_FILE, JobRecord, has_ended, outcome_recorded
from trainer.procs import GRACE_S, SUPERVISOR_PID
from veri_tui.errors import VeriError
from veri_tui.launch.records import LogLine, lost_record, wait_until_ended
from veri_tui.launch.ssh import files, registry
from veri_tui.launch.ssh.connection import Connection, ConnectionLost, command_line
from veri_tui.launch.ssh.tail import follow_remote

MAX_LOG_READ = 64 * 2**20

# Ends what the supervisor would have ended, on the remote host, with the uploaded code.
CANCEL_SCRIPT = """
import sys
from pathlib import Path
from trainer.jobdir import record_cancel
from trainer.procs import end_processes
job = Path(sys.argv[1])
end_processes(job, grace=2.0)
record_cancel(job)
"""


# A new attempt of the remote job: refusals as one `error: key: message` line, exit 3. The
# spec comes on stdin; a multi-node job's step choice (argv[2]) only when there is one, so a
# job uploaded by an older veri-tui still resumes.
RESUME_SCRIPT = """
import json, sys
from pathlib import Path
from trainer.attempts import ResumeRefused, prepare_resume
choice = [json.loads(sys.argv[2])] if sys.argv[2:] else []
try:
    record = prepare_resume(Path(sys.argv[1]), json.loads(sys.stdin.read() or "null"), *choice)
except ResumeRefused as exc:
    print(exc)
    sys.exit(3)
print(json.dumps(record))
"""


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

    def _alive(self, pid: int | None) -> bool:
        return pid is not None and self.conn.run(["kill", "-0", str(pid)]).exit_status == 0

    def get_job(self, job_id: str) -> JobRecord:
        """The remote job.json now, with a vanished supervisor reported as a lost job."""
        job = self._job(job_id)
        path = f"{job.job_dir}/{JOB_FILE}"
        try:
            record = files.read_json(self.conn.sftp(), path)
        except FileNotFoundError:
            raise VeriError(f"{path} is gone from {self.host}", key="job") from None
        if not has_ended(record) and not self._alive(self._supervisor_pid(job)):
            record = files.read_json(self.conn.sftp(), path)  # it may have just finished
            if not has_ended(record):
                record = lost_record(record, f"its supervisor on {self.host} is gone")
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
        ``choice``: a multi-node launcher's step (trainer.attempts.prepare_resume)."""
        job = self._job(job_id)
        pkg = posixpath.join(job.job_dir, "pkg")
        argv = ["env", f"PYTHONPATH={pkg}", job.python, "-c", RESUME_SCRIPT,
                f"{job.job_dir}/{JOB_FILE}"] + ([json.dumps(choice)] if choice else [])  # fmt: skip
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
        """SIGTERM the remote supervisor (it ends every rank); clean up itself if it is gone."""
        job = self._job(job_id)
        record = self.get_job(job_id)
        if outcome_recorded(record):
            return record
        pid = self._supervisor_pid(job)
        if pid is not None and self._alive(pid):
            self.conn.run(["kill", "-TERM", str(pid)])
            deadline = time.monotonic() + grace + 3.0
            while time.monotonic() < deadline:
                record = self.get_job(job_id)
                if outcome_recorded(record):
                    return record
                time.sleep(0.3)
            self.conn.run(["kill", "-KILL", str(pid)])
        pkg = posixpath.join(job.job_dir, "pkg")
        job_path = f"{job.job_dir}/{JOB_FILE}"
        line = command_line(["env", f"PYTHONPATH={pkg}", job.python, "-c", CANCEL_SCRIPT, job_path])
        res = self.conn.run_line(line, timeout=30)
        if res.exit_status != 0:
            raise VeriError(f"cancel on {self.host} failed: {res.error_line()}", key="job")
        return self.get_job(job_id)
