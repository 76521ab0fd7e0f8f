"""The job target: one job over N hosts, read, followed, cancelled and resumed as one.

A `JobTarget` holds the job's nodes (`Node`: a `Host`, the job folder there, the supervisor
pid seen at its start): one node for a job on this machine or on one SSH host, N for a
multi-node job. Every operation is the same code for any host (host.py):

- `get_job`: each node's job.json read on its host, judged by the one lost rule
  (jobfolder.lost); several nodes' records gathered into the job's (gather.py). A read
  writes nothing, anywhere: no signal, no start, no file;
  What a reader observed is kept by `settle.settle` (one write per change it saw);
- `read_log`, `follow_log`: rank 0's log, on node 0 (a multi-node job's follow goes on
  across the attempts its watcher starts);
- `cancel`: `python -m jobfolder cancel` on every node's host, at once, after the job's
  watcher is stopped;
- `resume`: `python -m jobfolder resume` on the host, then its supervisor started again
  (a multi-node job resumes on every node from one step: restart.py, which the facade
  calls).

jobindex.py finds a job's target: a folder under $VERI_HOME/jobs is this machine's, an entry
of the registry (registry.py) one launched over SSH.
"""

from __future__ import annotations

import json
import os
import posixpath
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from jobfolder.layout import JOB_FILE, LOG, SUPERVISOR_PID
from jobfolder.procs import GRACE_S, pid_alive
from jobfolder.record import JobRecord, JobSpec, ResumeChoice, format_problem
from jobfolder.status import has_ended, outcome_recorded
from veri_tui.errors import NotFoundError, VeriError
from veri_tui.launch import registry
from veri_tui.launch.gather import gather
from veri_tui.launch.host import Host, jobfolder_argv
from veri_tui.launch.hostpool import in_parallel
from veri_tui.launch.measured import so_far
from veri_tui.launch.records import LogLine, wait_until_ended
from veri_tui.launch.retries import retry_due

#: The most of the log one read returns (a follow reads on from where it stopped).
MAX_LOG_READ = 64 * 2**20
REFUSED = 3  # `python -m jobfolder resume`'s exit status for a refusal (one `error:` line)


@dataclass
class Node:
    """One node of a job: its host, its job folder there, the supervisor pid seen at start."""

    host: Host
    job_dir: str
    pid: int | None = None

    @property
    def job_file(self) -> str:
        return posixpath.join(self.job_dir, JOB_FILE)


class JobTarget:
    """One job, on its N nodes (node 0 holds rank 0: its log, its artifact)."""

    def __init__(self, job_id: str, nodes: list[Node], entry: registry.RegistryEntry | None):
        self.job_id = job_id
        self.nodes = nodes
        self.entry = entry
        self.name = nodes[0].host.name if entry is None else f"{entry.kind}:{entry.host}"

    def close(self) -> None:
        for node in self.nodes:
            node.host.close()

    # -- reading ---------------------------------------------------------------------------

    def supervisor_pid(self, node: Node) -> int | None:
        """The pid the supervisor wrote itself, else the one seen when it was started. A
        batch job's handle is its Slurm job id: its supervisor's pid is a compute node's."""
        from veri_tui.launch.backends import backend_of

        if not backend_of(node.host.kind).handle_is_pid:
            return node.pid
        try:
            raw = node.host.read_bytes(posixpath.join(node.job_dir, SUPERVISOR_PID), 64)
            return int(raw.split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return node.pid

    def node_record(self, node: Node) -> JobRecord:
        """One node's job.json, the lost rule applied on its host; VeriError when gone."""

        def read() -> JobRecord:
            try:
                raw = node.host.read_bytes(node.job_file, 16 * 2**20)
            except FileNotFoundError:
                if node.host.label is None:
                    raise NotFoundError(f"no job {self.job_id}; `veri-tui jobs` lists them"
                                        ) from None  # fmt: skip
                raise NotFoundError(f"{node.job_file} is gone from {node.host.name}") from None
            try:
                record = cast(JobRecord, json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, ValueError) as exc:
                raise NotFoundError(f"{node.job_file}: unreadable ({exc})") from exc
            newer = format_problem(record, node.job_file)
            if newer is not None:
                raise VeriError(newer, key="job")
            return record

        return node.host.judge(node.job_dir, read(), self.supervisor_pid(node), read)

    def get_job(self, job_id: str | None = None) -> JobRecord:
        """The job's record as its nodes' folders say now (see the module docstring)."""
        if len(self.nodes) == 1:
            record = self.node_record(self.nodes[0])
            if self.nodes[0].host.label is not None:
                record["host"] = self.nodes[0].host.label
        else:
            read = in_parallel(self.node_record, self.nodes)
            records = [r if isinstance(r, dict) else None for r in read]
            whys = [f"cannot reach {n.host.name} ({r})" if isinstance(r, Exception) else ""
                    for n, r in zip(self.nodes, read, strict=True)]  # fmt: skip
            record = gather(records, [n.host.name for n in self.nodes], whys)
        measured = so_far(record, self.nodes)
        if measured is not None:
            record["measured"] = measured
        return record

    def remember(self, record: JobRecord) -> None:
        """Keep the record last read in the registry entry (pids another process wrote
        meanwhile, a retry's, stay as written); no write when it holds that record. The
        caller holds the entry's lock (settle.py)."""
        if self.entry is None:
            return
        saved = registry.load(self.job_id)
        entry = saved if saved is not None else self.entry
        self.entry.record = record
        if entry.record != record:
            entry.record = record
            registry.save(entry)

    def list_jobs(self) -> list[JobRecord]:
        return [self.get_job()]

    def read_log(self, job_id: str | None = None, offset: int = 0) -> bytes:
        """Rank 0's log from byte ``offset`` to its current end (b"" before it exists)."""
        node = self.nodes[0]
        if node.host.label is None:
            self.get_job()  # unknown id -> VeriError
        try:
            return node.host.read_bytes(posixpath.join(node.job_dir, LOG), MAX_LOG_READ, offset)
        except FileNotFoundError:
            return b""

    def follow_log(self, job_id: str | None = None, offset: int = 0, **options: Any
                   ) -> Iterator[LogLine]:  # fmt: skip
        """Complete log lines from ``offset`` until the job has ended (a multi-node job's
        tail of node 0 goes on while its watcher starts another attempt)."""
        node = self.nodes[0]
        self.get_job()  # unknown id -> VeriError
        log = posixpath.join(node.job_dir, LOG)

        def lines() -> Iterator[LogLine]:
            nonlocal offset
            while True:
                got = False
                pid = self.supervisor_pid(node)
                for line in node.host.follow(log, pid, offset, self._ended, **options):
                    offset, got = line.end, True
                    yield line
                if len(self.nodes) == 1 or self._ended():
                    return
                if not got:
                    time.sleep(1.0)  # node 0 is done, another node is not yet

        return lines()

    def _ended(self) -> bool:
        return self.settled(self.get_job())

    def settled(self, record: JobRecord) -> bool:
        """Ended, with no retry still to come (a multi-node job's watcher, while it runs,
        restarts a platform failure that `max_restarts` allows)."""
        if not has_ended(record):
            return False
        if self.entry is None or len(self.nodes) == 1:
            return True
        fresh = registry.load(self.job_id) or self.entry
        watching = fresh.watcher is not None and pid_alive(fresh.watcher)
        return not (watching and retry_due(record, fresh))

    def wait(self, job_id: str | None = None, poll_s: float = 1.0) -> JobRecord:
        """Block until the job has ended (and no retry is to come); its final record."""
        while True:
            record = wait_until_ended(self.get_job, poll_s)
            if self.settled(record):
                return record
            time.sleep(poll_s)

    # -- changing ------------------------------------------------------------------------

    def stop_watcher(self) -> None:
        """End the job's watcher (its retries stop with it); waits for it to go."""
        fresh = registry.load(self.job_id) if self.entry is not None else None
        pid = fresh.watcher if fresh is not None else None
        if pid is None or not pid_alive(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30.0  # it finishes a restart it has begun
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)

    def cancel(self, job_id: str | None = None, grace: float = GRACE_S) -> JobRecord:
        """End every rank on every node (SIGTERM, SIGKILL after ``grace``); the record after.
        A node that cannot be reached is reported, not skipped."""
        self.stop_watcher()

        def one(node: Node) -> None:
            if not outcome_recorded(self.node_record(node)):
                node.host.cancel_job(node.job_dir, node.pid, grace)

        if len(self.nodes) == 1:
            one(self.nodes[0])
            return self.get_job()
        done = in_parallel(one, self.nodes)
        unreachable = [f"{n.host.name}: {r}" for n, r in zip(self.nodes, done, strict=True)
                       if isinstance(r, Exception)]  # fmt: skip
        record = self.get_job()
        if unreachable:
            raise VeriError(f"cancel did not reach every node ({'; '.join(unreachable)})", "job")
        return record

    def prepare(self, k: int, spec: JobSpec | None, choice: ResumeChoice | None = None
                ) -> JobRecord:  # fmt: skip
        """Node ``k``'s job made `pending` for its next attempt, starting nothing."""
        node = self.nodes[k]
        more = ["--choice", json.dumps(choice)] if choice else []
        argv = jobfolder_argv(node.host, node.job_dir, "resume", node.job_file, *more)
        res = node.host.run(argv, timeout=60, stdin=json.dumps(spec).encode())
        if res.exit_status != 0:
            text = res.text.strip().splitlines()[-1] if res.text.strip() else ""
            key, _, message = text.removeprefix("error: ").partition(": ")
            if res.exit_status == REFUSED and message:
                raise VeriError(message, key=key)
            raise VeriError(f"resume on {node.host.where} failed: {res.error_line()}",
                            key="job")  # fmt: skip
        return cast(JobRecord, json.loads(res.text))

    def start(self, k: int) -> int:
        """Start node ``k``'s supervisor detached again; its pid (kept in the registry)."""
        node = self.nodes[k]
        node.pid = node.host.start_supervisor(node.job_dir)
        if self.entry is not None:
            fresh = registry.load(self.job_id) or self.entry
            if fresh.nodes:
                fresh.nodes[k]["pid"] = node.pid
            if k == 0:
                fresh.pid = node.pid
            self.entry = fresh
            registry.save(fresh)
        return node.pid

    def resume(self, job_id: str | None = None, spec: JobSpec | None = None) -> JobRecord:
        """A new attempt of the ended one-node job in its folder, from the newest verified
        checkpoint (the supervisor chooses it); ``spec`` replaces the job's spec (a
        re-plan). A multi-node job resumes through restart.resume_nodes."""
        record = self.prepare(0, spec)
        self.start(0)
        return record

    def append_log(self, line: str) -> None:
        """Add a line to rank 0's log (once its supervisor has ended: no writer races it)."""
        node = self.nodes[0]
        try:
            node.host.append(posixpath.join(node.job_dir, LOG), (line + "\n").encode())
        except OSError:
            pass  # the log says less; the record still tells the outcome

    def watch_if_needed(self) -> None:
        """A multi-node job gets its watcher (watcher.py), started detached in its own
        session (it outlives this process): the process that ends the other nodes of a
        failed job and retries a platform failure. Its pid goes in the registry entry."""
        if len(self.nodes) == 1 or self.entry is None:
            return
        log = registry.registry_dir() / f"{self.job_id}.watcher.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "veri_tui.launch.watcher", self.job_id],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        entry = registry.load(self.job_id) or self.entry
        entry.watcher = proc.pid
        registry.save(entry)
        self.entry = entry
