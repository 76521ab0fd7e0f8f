"""The job operations of a backend whose job is one supervisor per node: `direct` and
`slurm` share them here, and differ only in the four steps each gives (`start`, `judge`,
`stop`, `tail`).

- `probe`: every host's facts, in parallel (host.py `probe`; VeriError for the first host
  that cannot answer);
- `submit`: every prepared job folder's supervisor started, in parallel; the typed handle
  (ref.py), or `SubmitError` with the nodes that did start;
- `state`: each node's job.json read on its host and judged by the backend (`judge`: the
  lost rule on a pid, or the scheduler's state); several nodes gathered (gather.py). A read
  writes nothing, anywhere;
- `cancel`: the job's watcher stopped (its retries), then `stop` on every node whose outcome
  is not recorded, at once; a node that cannot be reached is reported, not skipped;
- `logs`, `follow`: rank 0's log on node 0, read by offset or followed (`tail`) until the
  job has settled (a multi-node job's tail goes on across its watcher's attempts).

The job they act on is the open job (target.py's `JobTarget`: its nodes' hosts, connected
for its life); this module imports neither it nor the registry (they import the backends).
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from veri_tui.errors import NotFoundError, VeriError
from veri_tui.jobfolder.contract.layout import LOG, SUPERVISOR_PID
from veri_tui.jobfolder.contract.record import (
    JobRecord,
    JobSpec,
    ResumeChoice,
    format_problem,
    scheduler_of,
)
from veri_tui.jobfolder.contract.status import has_ended, outcome_recorded
from veri_tui.launch.backends.ref import JobRef, NodeRef, SubmitError
from veri_tui.launch.hostpool import all_or_raise, in_parallel

if TYPE_CHECKING:
    from veri_tui.launch.backends.api import Option
    from veri_tui.launch.host import Host, HostFacts
    from veri_tui.launch.loglines import LogLine
    from veri_tui.launch.probe.report import ProbeReport
    from veri_tui.launch.target import JobTarget, Node
    from veri_tui.plan import JobConfig

#: `python -m veri_tui.jobfolder resume`'s exit status for a refusal (one `error:` line).
REFUSED = 3
#: The most of the log one read returns (a follow reads on from where it stopped).
MAX_LOG_READ = 64 * 2**20


def supervisor_pid(node: Node) -> int | None:
    """The pid of the node's supervisor on its host: the one it wrote itself, else its
    handle (a `direct` node's is the pid seen at its start). A batch job's supervisor runs
    on a compute node: its backend never asks."""
    try:
        raw = node.host.machine.read_bytes(posixpath.join(node.job_dir, SUPERVISOR_PID), 64)
        return int(raw.split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return int(node.handle) if node.handle and node.handle.isdigit() else None


class SupervisedBackend:
    """The operations; a backend subclass gives `start`, `judge`, `stop` and `tail`."""

    name: str
    #: The app's scheduler choice says only its name unless a backend says what it does.
    summary: str = ""
    #: Its hosts are the nodes (a scheduler that allocates them says so).
    allocates: bool = False
    #: `veri-tui probe` probes none of its nodes unless a backend says how.
    probe_options: tuple[Option, ...] = ()

    def probe_nodes(self, values: Mapping[str, object], trust: str | None,
                    ranks_per_node: int | None, sizes: Sequence[int] | None
                    ) -> ProbeReport | None:  # fmt: skip
        return None

    # -- what a backend gives --------------------------------------------------------------

    def start(self, host: Host, job_dir: str) -> str:
        """Start the supervisor of the prepared folder ``job_dir`` on ``host``; its handle."""
        raise NotImplementedError

    def judge(self, job: JobTarget, node: Node, record: JobRecord,
              reread: Callable[[], JobRecord]) -> JobRecord:  # fmt: skip
        """``record`` (node's job.json) as the backend sees the job now."""
        raise NotImplementedError

    def stop(self, job: JobTarget, node: Node, grace: float) -> None:
        """End the node's ranks (SIGTERM, SIGKILL after ``grace``) and record `cancelled`."""
        raise NotImplementedError

    def tail(self, job: JobTarget, node: Node, path: str, offset: int,
             done: Callable[[], bool], **options: object) -> Iterator[LogLine]:  # fmt: skip
        """Complete lines of the node's log ``path`` from ``offset`` while its job runs."""
        raise NotImplementedError

    # -- the operations ----------------------------------------------------------------------

    def probe(self, hosts: Sequence[Host], job: JobConfig, dataset_bytes: int
              ) -> list[HostFacts]:  # fmt: skip
        return all_or_raise(in_parallel(lambda h: h.probe(job, dataset_bytes), list(hosts)))

    def submit(self, job_id: str, hosts: Sequence[Host], dirs: Sequence[str]) -> JobRef:
        started = in_parallel(lambda k: self.start(hosts[k], dirs[k]), list(range(len(hosts))))
        nodes = tuple(NodeRef(h.machine.name, d, s if isinstance(s, str) else None)
                      for h, d, s in zip(hosts, dirs, started, strict=True))  # fmt: skip
        ref = JobRef(self.name, hosts[0].kind, job_id, nodes)
        broken = [s for s in started if isinstance(s, Exception)]
        if broken:
            raise SubmitError(ref, broken[0])
        return ref

    def prepare(self, job: JobTarget, node: Node, spec: JobSpec | None,
                choice: ResumeChoice | None = None) -> JobRecord:  # fmt: skip
        """The node's job made `pending` for its next attempt (`python -m veri_tui.jobfolder
        resume` on its host), starting nothing; VeriError with its refusal."""
        from veri_tui.launch.host import jobfolder_argv  # an operation's: not in every parser

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

    def resume(self, job: JobTarget, spec: JobSpec | None) -> tuple[JobRecord, JobRef]:
        """A new attempt of the ended one-node job in its folder, from the newest verified
        checkpoint (its supervisor chooses it); ``spec`` replaces its spec (a re-plan). The
        record prepared, and the handle it was submitted under."""
        record = self.prepare(job, job.nodes[0], spec)
        return record, self.submit(job.job_id, [n.host for n in job.nodes],
                                   [n.job_dir for n in job.nodes])  # fmt: skip

    def keep_outcome(self, job: JobTarget, record: JobRecord) -> None:
        """A batch job that ended unrecorded: the outcome its scheduler's state means (the
        judge's view carries the scheduler's `state`), recorded by `python -m
        veri_tui.jobfolder close` on its host, under the job lock (a no-op once one is
        there); a lost verdict is a reader's, never written."""
        state = (scheduler_of(record) or {}).get("state")
        if len(job.nodes) > 1 or not has_ended(record) or state is None or record.get("lost"):
            return
        from veri_tui.launch.host import jobfolder_argv  # an operation's: not in every parser

        node = job.nodes[0]
        error = record.get("error")
        more = ["--error", json.dumps(error)] if error else []
        argv = jobfolder_argv(node.host, node.job_dir, "close", node.job_file,
                              "--status", str(record.get("status")), *more)  # fmt: skip
        node.host.machine.run(argv, timeout=60)

    def node_state(self, job: JobTarget, node: Node) -> JobRecord:
        """One node's job.json, judged on its host; NotFoundError when it is gone."""

        def read() -> JobRecord:
            try:
                raw = node.host.machine.read_bytes(node.job_file, 16 * 2**20)
            except FileNotFoundError:
                if node.host.label is None:
                    raise NotFoundError(f"no job {job.job_id}; `veri-tui jobs` lists them"
                                        ) from None  # fmt: skip
                raise NotFoundError(
                    f"{node.job_file} is gone from {node.host.machine.name}"
                ) from None
            try:
                record = cast(JobRecord, json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, ValueError) as exc:
                raise NotFoundError(f"{node.job_file}: unreadable ({exc})") from exc
            newer = format_problem(record, node.job_file)
            if newer is not None:
                raise VeriError(newer, key="job")
            return record

        return self.judge(job, node, read(), read)

    def state(self, job: JobTarget) -> JobRecord:
        # Imported here: the registry loads this module in every command's parser (`plan`
        # too), and gathering reads the failure rules, ~10 ms of a plan's start-up.
        from veri_tui.launch.gather import gather
        from veri_tui.launch.measured import so_far

        nodes = job.nodes
        if len(nodes) == 1:
            record = self.node_state(job, nodes[0])
            if nodes[0].host.label is not None:
                record["host"] = nodes[0].host.label
        else:
            read = in_parallel(lambda n: self.node_state(job, n), nodes)
            records = [r if isinstance(r, dict) else None for r in read]
            whys = [f"cannot reach {n.host.machine.name} ({r})" if isinstance(r, Exception) else ""
                    for n, r in zip(nodes, read, strict=True)]  # fmt: skip
            record = gather(records, [n.host.machine.name for n in nodes], whys)
        measured = so_far(record, nodes)
        if measured is not None:
            record["measured"] = measured
        return record

    def cancel(self, job: JobTarget, grace: float) -> None:
        from veri_tui.launch.watching import stop_watcher  # an operation's: not in every parser

        stop_watcher(job)  # a multi-node job's retries end first

        def one(node: Node) -> None:
            if not outcome_recorded(self.node_state(job, node)):
                self.stop(job, node, grace)

        if len(job.nodes) == 1:
            one(job.nodes[0])
            return
        done = in_parallel(one, job.nodes)
        unreachable = [f"{n.host.machine.name}: {r}" for n, r in zip(job.nodes, done, strict=True)
                       if isinstance(r, Exception)]  # fmt: skip
        if unreachable:
            raise VeriError(f"cancel did not reach every node ({'; '.join(unreachable)})", "job")

    def logs(self, job: JobTarget, offset: int) -> bytes:
        node = job.nodes[0]
        if node.host.label is None:
            self.state(job)  # unknown id -> VeriError
        try:
            return node.host.machine.read_bytes(
                posixpath.join(node.job_dir, LOG), MAX_LOG_READ, offset
            )
        except FileNotFoundError:
            return b""

    def follow(self, job: JobTarget, offset: int, **options: object) -> Iterator[LogLine]:
        node = job.nodes[0]
        self.state(job)  # unknown id -> VeriError, at once
        log = posixpath.join(node.job_dir, LOG)
        from veri_tui.launch.retries import settled  # an operation's: not in every parser

        def ended() -> bool:
            return settled(job, self.state(job))

        def lines() -> Iterator[LogLine]:
            nonlocal offset
            while True:
                got = False
                for line in self.tail(job, node, log, offset, ended, **options):
                    offset, got = line.end, True
                    yield line
                if len(job.nodes) == 1 or ended():
                    return
                if not got:
                    time.sleep(1.0)  # node 0 is done, another node is not yet

        return lines()
