"""A job held open for a reader's life: `with jobs.open(job_id) as job:` (the facade).

One `JobHandle` keeps one job target (target.py), so its hosts stay connected: the app's
monitor polls the record and reads the log every 0.5 s over one SSH connection per host,
closed when the handle is. Each call is its backend's operation on that target (backends/:
`state`, `logs`, `follow`, `cancel`; a resume's `submit`). Its reads (`get_job`,
`read_log`) write nothing; `poll` reads
and, when the job's state changed since its last look (status, attempt, verdict, canary
decision), keeps what it saw (`settle.settle`: job.json's scheduler outcome, the registry's
copy, the calibration). Following (`follow_log`, `watch`, `wait`) polls so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from types import TracebackType

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.attempts import resume_refusal
from veri_tui.jobfolder.contract.procs import GRACE_S
from veri_tui.jobfolder.contract.record import JobRecord, JobSpec
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch.backends import named
from veri_tui.launch.loglines import LogLine, follow_lines
from veri_tui.launch.retries import wait_settled
from veri_tui.launch.settle import settle
from veri_tui.launch.target import JobTarget
from veri_tui.launch.watching import start_watcher, stop_watcher


def _state(record: JobRecord) -> tuple[object, ...]:
    """What a change of the job is: its status, attempt, verdict and canary decision."""
    return (record.get("status"), len(record.get("attempts") or ()), record.get("lost"),
            (record.get("canary") or {}).get("decision"))  # fmt: skip


class JobHandle:
    """One job, open until `close` (or the end of its `with` block)."""

    def __init__(self, target: JobTarget) -> None:
        self.target = target
        self.backend = named(target.backend)
        self._seen: tuple[object, ...] | None = None

    def __enter__(self) -> JobHandle:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    @property
    def job_id(self) -> str:
        return self.target.job_id

    def get_job(self) -> JobRecord:
        """The job's record now (a lost supervisor reported as failed); writes nothing."""
        return self.backend.state(self.target)

    def poll(self) -> JobRecord:
        """`get_job`, and what it shows kept (settle.py) when the job changed since the
        last poll."""
        record = self.backend.state(self.target)
        state = _state(record)
        if state != self._seen:
            settle(self.target, record)
            self._seen = state
        return record

    def read_log(self, offset: int = 0) -> bytes:
        """Rank 0's log from byte ``offset`` to its current end; writes nothing."""
        return self.backend.logs(self.target, offset)

    def follow_log(self, offset: int = 0, **options: object) -> Iterator[LogLine]:
        """Complete rank-0 log lines from ``offset`` until the job has ended (VeriError for
        a job that cannot be read, at once); its end is polled once it is drained.
        ``options`` go to the host's tail (`on_reconnect`, `poll_s`)."""
        lines = self.backend.follow(self.target, offset, **options)

        def gen() -> Iterator[LogLine]:
            yield from lines
            self.poll()

        return gen()

    def watch(
        self,
        offset: int = 0,
        on_record: Callable[[JobRecord], None] | None = None,
        stop: Callable[[], bool] | None = None,
        poll_s: float = 0.5,
    ) -> Iterator[LogLine]:
        """Log lines with the record polled every ``poll_s`` and handed to ``on_record``
        before the log read that follows it (lines and record arrive in step, and the end
        is seen with every line written before it); ends once the job has ended and its
        log is drained, or as soon as ``stop()`` is true."""

        def done() -> bool:
            if stop is not None and stop():
                return True
            record = self.poll()
            if on_record is not None:
                on_record(record)
            return has_ended(record)

        return follow_lines(self.read_log, done, offset, poll_s)

    def wait(self, poll_s: float = 1.0) -> JobRecord:
        """Block until the job has ended with no retry to come; its final record."""
        wait_settled(self.target, self.get_job, poll_s)
        return self.poll()

    def cancel(self, grace: float = GRACE_S) -> JobRecord:
        """End every rank on every node; the record after (kept, as a poll keeps it)."""
        self.backend.cancel(self.target, grace)
        return self.poll()

    def resume(self, gpu_count: int | None = None, sets: Sequence[str] = (),
               wait: bool = False, nodes: int | None = None) -> JobRecord:  # fmt: skip
        """A new attempt of the ended job (the facade's `resume` says how); the record
        prepared, or the final one with ``wait``."""
        from veri_tui.launch.launching import replan
        from veri_tui.launch.restart import layout_refusal, resume_nodes, resume_one

        target, job_id = self.target, self.job_id
        many = len(target.nodes) > 1
        record = self.get_job()
        self.backend.refuse_nodes(nodes)
        if many:
            layout = layout_refusal(record, gpu_count, sets)
            if layout is not None:
                raise layout
        refused = resume_refusal(record, supervisor_alive=not has_ended(record))
        if refused is not None:
            raise VeriError(refused.message, key=refused.key)
        spec: JobSpec | None = None
        if not many:
            spec = replan(target.nodes[0].host, record, gpu_count, sets, nodes)
        try:
            stop_watcher(target)
            if many:
                record = resume_nodes(target)
            else:
                record = resume_one(target, spec)
        except VeriError:
            raise
        except Exception as exc:  # noqa: BLE001 - a host's I/O error: one error line
            raise VeriError(f"resume of {job_id} failed: {exc}", key="job") from exc
        settle(target, record)  # the registry's copy says pending again
        start_watcher(target)
        return self.wait() if wait else record

    def close(self) -> None:
        """Close the job's hosts (its SSH connections)."""
        self.target.close()
