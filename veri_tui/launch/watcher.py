"""A multi-node job's watcher: `python -m veri_tui.launch.watcher JOB_ID`, on this machine.

No node's supervisor can see the other nodes, so a process on the launching machine does
what the job needs across them, and nothing else does it (a read of the job changes
nothing; its polls keep what they saw, as any follower's do: settle.py):
- once a node has failed, it ends the others: each is told which node failed, then its
  supervisor gets SIGTERM, and records a peer's failure (not a cancel) unless its own
  torchrun had already ended, whose end it reports as it would have; the failed node's
  error decides the attempt (gather.py);
- once the job failed for the platform with `max_restarts` left, it restarts every node
  from the newest step verified on all of them (restart.py), the attempt marked `retry`.

It is started detached when the job is launched or resumed (target.py `watch_if_needed`),
its pid kept in the job's registry entry and its output in
`$VERI_HOME/remote/<id>.watcher.log`;
`veri-tui jobs JOB` shows it while it runs, and `veri-tui cancel JOB` stops it first. It
ends when the job has ended with no retry to come, on SIGTERM, or when the job cannot be
read for `MAX_MISSES` looks in a row.
"""

from __future__ import annotations

import posixpath
import signal
import sys
import time
from types import FrameType

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.layout import PEER_FAILED
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import FAILED, has_ended
from veri_tui.jobfolder.contract.stopping import peer_failed_bytes
from veri_tui.launch import registry
from veri_tui.launch.backends.supervised import supervisor_pid
from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobindex import target_of_entry
from veri_tui.launch.restart import retry
from veri_tui.launch.retries import retry_due
from veri_tui.launch.target import JobTarget

POLL_S = 1.0
#: Looks in a row that may fail (its hosts out of reach) before the watcher gives up.
MAX_MISSES = 600


class Watcher:
    """Watches one multi-node job until it has settled."""

    def __init__(self, target: JobTarget) -> None:
        self.target = target
        self.job = JobHandle(target)  # its polls keep the registry's copy (settle.py)
        self.stopping = False

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def end_the_others(self, record: JobRecord) -> None:
        """A node failed: end every node still running. Each is told which node failed
        (`peer_failed.json`, veri_tui/jobfolder/contract/stopping.py) before its supervisor gets
        SIGTERM, so it records that failure's end, never a cancel, whichever end it reaches
        first."""
        failed = next(n for n in record.get("nodes") or [] if n["status"] == FAILED)
        code = str((record.get("error") or {}).get("code") or "")
        word = peer_failed_bytes(failed["node"], failed["host"], code)
        for node in self.target.nodes:
            try:
                rec = self.target.node_record(node)
            except VeriError:
                continue
            pid = supervisor_pid(node)
            if not has_ended(rec) and pid is not None:
                node.host.machine.write_atomic(posixpath.join(node.job_dir, PEER_FAILED), word)
                node.host.machine.run(["kill", "-TERM", str(pid)])

    def step(self) -> bool:
        """One look at the job; True while there is more to watch."""
        record = self.job.poll()
        nodes = record.get("nodes") or []
        if record.get("status") != FAILED and any(n["status"] == FAILED for n in nodes):
            self.end_the_others(record)
            return True
        if not has_ended(record):
            return True
        entry = registry.load(self.target.job_id)
        if entry is not None and retry_due(record, entry) and not self.stopping:
            retry(self.target)
            return True
        return False

    def run(self) -> int:
        """Watch until the job has settled (or SIGTERM); the exit status."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        misses = 0
        while not self.stopping and registry.load(self.target.job_id) is not None:
            try:
                if not self.step():
                    return 0
                misses = 0
            except VeriError as exc:  # a node out of reach: look again, a while
                misses += 1
                print(f"watcher: {exc}", flush=True)
                if misses >= MAX_MISSES:
                    return 1
            time.sleep(POLL_S)
        return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: watch the job named on the command line."""
    args = sys.argv[1:] if argv is None else argv
    entry = registry.load(args[0]) if args else None
    if entry is None or not entry.nodes:
        print(f"watcher: no multi-node job {args[:1]}", file=sys.stderr)
        return 2
    target = target_of_entry(entry)
    try:
        return Watcher(target).run()
    finally:
        target.close()


if __name__ == "__main__":
    raise SystemExit(main())
