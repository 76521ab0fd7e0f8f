"""The open job: one job over N hosts, its nodes' hosts connected for a reader's life.

A `JobTarget` holds the job's nodes (`Node`: a `Host`, the job folder there, the node's
handle: the supervisor's pid, or the scheduler's job id), its registry entry (None for a job
on this machine) and its backend (backends/), whose operations it calls: `get_job` is the
backend's `state`, `read_log` its `logs`, `follow_log` its `follow`, `cancel` its `cancel`
(which stops the job's watcher first), and a resume's start its `submit`, whose typed handle
(`JobRef`) is adopted and kept in the registry entry. What it does itself is the job's
bookkeeping on this machine:

- `remember`: the registry's copy of the record a reader settled (settle.py);
- `settled`, `wait`: ended with no retry to come (a multi-node job's watcher may retry);
- `prepare`: `python -m veri_tui.jobfolder resume` on a node's host (its next attempt, pending);
- `resume`: a one-node job prepared and submitted again (a multi-node job resumes on every
  node from one step: restart.py, which the facade calls);
- `stop_watcher`, `watch_if_needed`: a multi-node job's watcher (watcher.py).

jobindex.py finds a job's target: a folder under $VERI_HOME/jobs is this machine's, an entry
of the registry (registry.py) one launched over SSH or with Slurm.
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
from typing import cast

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import JOB_FILE, LOG
from veri_tui.jobfolder.contract.procs import GRACE_S, pid_alive
from veri_tui.jobfolder.contract.record import JobRecord, JobSpec, ResumeChoice
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch import registry
from veri_tui.launch.backends import backend_of
from veri_tui.launch.backends.api import AnyBackend
from veri_tui.launch.backends.ref import JobRef, NodeRef, SubmitError
from veri_tui.launch.host import Host, jobfolder_argv
from veri_tui.launch.records import LogLine, wait_until_ended
from veri_tui.launch.retries import retry_due

REFUSED = 3  # `python -m veri_tui.jobfolder resume`'s exit status for a refusal (one `error:` line)


@dataclass
class Node:
    """One node of a job: its host, its job folder there, its handle (opaque: the supervisor's
    pid seen at its start, or the scheduler's job id; None: not started)."""

    host: Host
    job_dir: str
    handle: str | None = None

    @property
    def job_file(self) -> str:
        return posixpath.join(self.job_dir, JOB_FILE)


class JobTarget:
    """One job, on its N nodes (node 0 holds rank 0: its log, its artifact)."""

    def __init__(self, job_id: str, nodes: list[Node], entry: registry.RegistryEntry | None):
        self.job_id = job_id
        self.nodes = nodes
        self.entry = entry
        self.backend: AnyBackend = backend_of(nodes[0].host.kind)
        self.name = nodes[0].host.machine.name if entry is None else f"{entry.kind}:{entry.host}"

    @property
    def ref(self) -> JobRef:
        """The job's typed handle as its nodes hold it now."""
        nodes = tuple(NodeRef(n.host.machine.name, n.job_dir, n.handle) for n in self.nodes)
        return JobRef(self.backend.name, self.nodes[0].host.kind, self.job_id, nodes)

    def close(self) -> None:
        for node in self.nodes:
            node.host.machine.close()

    # -- reading: the backend's operations ------------------------------------------------

    def node_record(self, node: Node) -> JobRecord:
        """One node's job.json as its backend judges it; VeriError when gone."""
        return self.backend.node_state(self, node)

    def get_job(self, job_id: str | None = None) -> JobRecord:
        """The job's record as its nodes' folders say now; writes nothing."""
        return self.backend.state(self)

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
        return self.backend.logs(self, offset)

    def follow_log(self, job_id: str | None = None, offset: int = 0, **options: object
                   ) -> Iterator[LogLine]:  # fmt: skip
        """Complete log lines from ``offset`` until the job has ended (a multi-node job's
        tail of node 0 goes on while its watcher starts another attempt)."""
        return self.backend.follow(self, offset, **options)

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
        self.backend.cancel(self, grace)
        return self.get_job()

    def prepare(self, k: int, spec: JobSpec | None, choice: ResumeChoice | None = None
                ) -> JobRecord:  # fmt: skip
        """Node ``k``'s job made `pending` for its next attempt, starting nothing."""
        node = self.nodes[k]
        more = ["--choice", json.dumps(choice)] if choice else []
        argv = jobfolder_argv(node.host, node.job_dir, "resume", node.job_file, *more)
        res = node.host.machine.run(argv, timeout=60, stdin=json.dumps(spec).encode())
        if res.exit_status != 0:
            text = res.text.strip().splitlines()[-1] if res.text.strip() else ""
            key, _, message = text.removeprefix("error: ").partition(": ")
            if res.exit_status == REFUSED and message:
                raise VeriError(message, key=key)
            raise VeriError(f"resume on {node.host.where} failed: {res.error_line()}",
                            key="job")  # fmt: skip
        return cast(JobRecord, json.loads(res.text))

    def submit(self) -> JobRef:
        """Start every node's prepared attempt (the backend's `submit`); its handle, kept in
        the registry entry. A node that cannot be started raises its failure (the nodes that
        did start are kept so too: the caller ends them)."""
        try:
            ref = self.backend.submit(self.job_id, [n.host for n in self.nodes],
                                      [n.job_dir for n in self.nodes])  # fmt: skip
        except SubmitError as exc:
            self.adopt(exc.ref)
            raise exc.cause from None
        self.adopt(ref)
        return ref

    def adopt(self, ref: JobRef) -> None:
        """Take the handles of ``ref`` (those started: a node not started keeps its own),
        and keep them in the registry entry."""
        for node, given in zip(self.nodes, ref.nodes, strict=True):
            if given.handle is not None:
                node.handle = given.handle
        if self.entry is not None:
            fresh = registry.load(self.job_id) or self.entry
            if fresh.nodes:
                for saved, node in zip(fresh.nodes, self.nodes, strict=True):
                    saved["handle"] = node.handle
            fresh.handle = self.nodes[0].handle
            self.entry = fresh
            registry.save(fresh)

    def resume(self, job_id: str | None = None, spec: JobSpec | None = None) -> JobRecord:
        """A new attempt of the ended one-node job in its folder, from the newest verified
        checkpoint (the supervisor chooses it); ``spec`` replaces the job's spec (a
        re-plan). A multi-node job resumes through restart.resume_nodes."""
        record = self.prepare(0, spec)
        self.submit()
        return record

    def append_log(self, line: str) -> None:
        """Add a line to rank 0's log (once its supervisor has ended: no writer races it)."""
        node = self.nodes[0]
        try:
            node.host.machine.append(posixpath.join(node.job_dir, LOG), (line + "\n").encode())
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
