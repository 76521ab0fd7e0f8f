"""The two orders that lost a multi-node job's retry under load, made explicit (no
torchrun, no sshd: the real supervisor, lost rule and gathering on records and processes).

1. A reader whose node pids are the launch's (`launch --wait`'s follow) read a node the
   watcher was restarting: job.json `pending`, the pid file not written yet, so the old
   supervisor's dead pid; by the re-read the new supervisor had begun the retried attempt.
   The lost rule called that node lost with the new attempt in its record; the gathered job
   then looked failed with its one restart spent, the follow ended, and its output had no
   retry (docs/reliability.md). A record that changed between the reads is now reported as
   read again (veri_tui/jobfolder/contract/lost.py).
2. A node the watcher ended after another node failed recorded a user's cancel ("job
   cancelled: every rank ended"); it now records that failure as its peer's (`peer_failed.json`,
   veri_tui/jobfolder/contract/stopping.py; supervise.py), and the failed node's own error decides
   the gathered attempt (veri_tui/launch/gather.py). Here the real supervisor's `run_attempt` runs a
   real child process in torchrun's place (a sleep, or one that already exited), and the watcher's
   two steps, the file and the SIGTERM (the flag its handler sets), come before the supervisor
   looks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import wait_for

from veri_tui.jobfolder.contract.layout import PEER_FAILED
from veri_tui.jobfolder.contract.lost import judge
from veri_tui.jobfolder.contract.procs import pid_alive, read_pid
from veri_tui.jobfolder.contract.stopping import peer_failed_bytes
from veri_tui.jobfolder.supervise.launcher import TorchrunLauncher
from veri_tui.jobfolder.supervise.supervisor import Supervisor
from veri_tui.launch.gather import gather
from veri_tui.launch.registry import RegistryEntry
from veri_tui.launch.retries import retry_due

ENTRY = RegistryEntry("j", "a", "/x", "1", "python3", {}, [])
SPEC = {"gpu_count": 2, "nproc_per_node": 1, "nnodes": 2, "node_rank": 0,
        "hyperparameters": {"max_restarts": 1, "hang_timeout_s": 600}}  # fmt: skip


class Node0(Supervisor):
    """The real supervisor, with ``child`` run in torchrun's place."""

    def __init__(self, job_path: Path, child: str) -> None:
        super().__init__(job_path, TorchrunLauncher())
        self.child = child

    def command(self, spec: Mapping[str, Any]) -> list[str]:
        return [sys.executable, "-c", self.child]


def node(tmp_path: Path, child: str, peer: bool) -> Node0:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"job_id": "j-node0", "status": "running", "spec": SPEC}))
    (tmp_path / "log.txt").write_text("")
    if peer:  # the watcher's first step: which node failed
        (tmp_path / PEER_FAILED).write_bytes(peer_failed_bytes(1, "veri-test-2", "RANK_LOST"))
    sup = Node0(job, child)
    sup.cancel_requested = True  # its second: the SIGTERM (what the handler sets)
    return sup


def test_a_node_the_watcher_ends_records_the_peers_failure(tmp_path: Path) -> None:
    sup = node(tmp_path, "import time; time.sleep(60)", peer=True)
    code, status, error = sup.run_attempt(SPEC)
    assert status == "failed" and error is not None
    assert (error["code"], error["attribution"], error["node"]) == ("COMM_ERROR", "platform", 0)
    assert error["message"] == (
        "another node failed: node 1 (veri-test-2), RANK_LOST; the job's watcher ended this node"
    )
    assert "job cancelled" not in (tmp_path / "log.txt").read_text()
    assert error["summary"] in (tmp_path / "log.txt").read_text()


class Late(Node0):
    """The watcher's SIGTERM lands after torchrun ended on its own, before the supervisor
    looked: the first look in its loop waits for the child to be gone, then the flag."""

    def read_signal(self) -> None:
        if not self.signals:
            return
        self.signals.pop(0)
        pid = read_pid(self.layout.torchrun_pid)
        wait_for(lambda: pid is not None and not pid_alive(pid), 30, "the child to exit")
        self.cancel_requested = True


def test_a_node_whose_torchrun_had_ended_keeps_its_own_end(tmp_path: Path) -> None:
    sup = node(tmp_path, "raise SystemExit(1)", peer=True)
    late = Late(sup.job_path, "raise SystemExit(1)")
    late.signals = [0]  # one look, in the loop's first pass
    code, status, error = late.run_attempt(SPEC)
    assert (code, status) == (1, "failed") and error is not None
    assert error["message"].startswith("torchrun exited with code 1")  # read as it ended


def test_without_the_watchers_word_a_sigterm_is_still_a_cancel(tmp_path: Path) -> None:
    sup = node(tmp_path, "import time; time.sleep(60)", peer=False)
    code, status, error = sup.run_attempt(SPEC)
    assert (status, error) == ("cancelled", None)
    assert "job cancelled: every rank ended" in (tmp_path / "log.txt").read_text()


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_the_failed_nodes_error_decides_the_attempt_and_a_retry_is_due(
    order: tuple[int, int],
) -> None:
    said = "another node failed: node 1 (b), RANK_LOST; the job's watcher ended this node"
    lost = {"code": "RANK_LOST", "attribution": "platform", "node": 1,
            "message": "killed by signal 9 (SIGKILL), pid 7"}  # fmt: skip
    peer = {"code": "COMM_ERROR", "attribution": "platform", "node": 0, "message": said}
    attempt = {"attempt": 1, "status": "failed"}
    recs = [{"job_id": "j", "status": "failed", "spec": SPEC, "error": e,
             "attempts": [{**attempt, "error": e}]} for e in (peer, lost)]  # fmt: skip
    got = gather([recs[k] for k in order], ["a", "b"], ["", ""])
    assert got["status"] == "failed" and got["error"]["code"] == "RANK_LOST"
    assert got["attempts"][0]["error"]["code"] == "RANK_LOST"
    assert retry_due(got, ENTRY)


def test_a_reader_with_the_old_pid_never_calls_a_node_lost_that_began_its_retry() -> None:
    first = {"attempt": 1, "status": "failed", "error": {"code": "RANK_LOST"}}
    prepared = {"job_id": "j-node0", "status": "pending", "spec": SPEC, "attempts": [first],
                "resumed_at": "2026-12-06T06:47:10+00:00"}  # fmt: skip
    begun = {**prepared, "status": "running",
             "attempts": [first, {"attempt": 2, "status": "running", "retry": True}]}  # fmt: skip
    dead = lambda pid: False  # noqa: E731 - the old supervisor's pid: gone
    got = judge(prepared, 4212, dead, lambda: begun, where="a")
    assert got is begun and not got.get("lost")
    # Gathered with node 1 not started yet (its old pid: lost), the job still runs: no
    # reader takes the retried attempt for the job's end.
    node1 = judge(prepared, 4213, dead, lambda: prepared, where="b")
    assert node1["lost"] and node1["status"] == "failed"  # unchanged between the reads
    job = gather([got, node1], ["a", "b"], ["", ""])
    assert job["status"] == "running"
    # What the old rule made of it: both lost, failed, the one restart spent, no retry due.
    old = gather([{**begun, "status": "failed", "lost": True}, node1], ["a", "b"], ["", ""])
    assert old["status"] == "failed" and not retry_due(old, ENTRY)
