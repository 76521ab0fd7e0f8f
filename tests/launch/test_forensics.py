"""Hang forensics without torchrun: reading Flight Recorder dumps, the dump request, NCCL aborts.

The dumps here have the shape torch 2.13's `_dump_fr_trace` gives on gloo (keys and values
as seen in a real 2-rank run); the dump request is answered by the real rank-side thread
(veri_tui/trainer/forensics.py) running in this process, and a really stopped process is "silent".
The NCCL cases read a torchrun log written the way NCCL's watchdog and torchrun print (the
lines of LLaMA-Factory #7396 and Megatron-LM #1207), since no GPU is here.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import time
from pathlib import Path

import pytest
from launch_helpers import wait_for
from test_failures import summary_entry, torchrun_log

from veri_tui.jobfolder.contract.procs import rank_pid_path, write_pid
from veri_tui.jobfolder.failures import failures, forensics, ncclabort
from veri_tui.jobfolder.failures.flightrec import short_path, stuck_collective, where
from veri_tui.jobfolder.failures.forensics import Answers, collect, load_fr_pickle
from veri_tui.jobfolder.failures.hangreport import explain

TRAINER_STACK = [
    ["/venv/lib/python3.11/site-packages/torch/distributed/run.py", 10, "main"],
    ["/work/repo/veri_tui/trainer/__main__.py", 62, "main"],
    ["/work/repo/veri_tui/trainer/loop.py", 123, "train"],
    ["/work/repo/veri_tui/trainer/data.py", 88, "rank_slice"],
]
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
IN_ALL_REDUCE = [["/work/repo/veri_tui/trainer/loop.py", 219, "step"], [C10D, 3252, "all_reduce"]]
IN_RENDEZVOUS = [
    ["/work/repo/veri_tui/trainer/parallelize.py", 82, "init_runtime"],
    [C10D, 1899, "init_process_group"],
]


def entry(seq: int, done: bool, kind: str = "gloo:all_reduce", **kw: object) -> dict:
    base = {
        "collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "pg_id": 0,
        "process_group": ["0", "default_pg"], "profiling_name": kind, "retired": done,
        "state": "scheduled", "input_sizes": [[2]], "input_dtypes": ["Double"],
        "time_created_ns": 1_000 + seq,
    }  # fmt: skip
    return {**base, **kw}


def fr(*entries: dict) -> dict:
    return {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": list(entries)}


def answer(rank: int, stack: list, *entries: dict) -> dict:
    return {"rank": rank, "stack": stack, "flight_recorder": fr(*entries)}


def test_paths_and_the_frame_a_stack_is_placed_at() -> None:
    assert short_path("/x/site-packages/torch/distributed/run.py") == "torch/distributed/run.py"
    assert short_path("/work/wt/veri_tui/trainer/data.py") == "veri_tui/trainer/data.py"
    assert short_path("/work/wt/trainer/data.py") == "trainer/data.py"  # a release before
    assert where(TRAINER_STACK) == "veri_tui/trainer/data.py:88 in rank_slice"
    assert where(IN_ALL_REDUCE) == "veri_tui/trainer/loop.py:219 in step"  # ours, not torch's frame
    assert where([]) == ""


def test_a_rank_that_never_entered_the_collective_is_named_with_its_stack() -> None:
    answers = Answers(
        {
            0: answer(0, IN_ALL_REDUCE, entry(56, True), entry(57, False)),
            1: answer(1, TRAINER_STACK, entry(56, True)),
        },
        {},
    )
    found = explain(answers, [0, 1])
    assert found.blamed == [1]
    assert found.headline == (
        "rank 1 never entered all_reduce #57 of the default group, which rank 0 waits in; "
        "rank 1 at veri_tui/trainer/data.py:88 in rank_slice"
    )
    text = "\n".join(found.lines)
    assert "waited in: all_reduce #57 of the default group, input sizes [[2]] Double" in text
    assert "rank 1: never entered it (newest in the group: all_reduce #56, completed)" in text
    assert "      veri_tui/trainer/data.py:88 in rank_slice" in text
    assert "torch/distributed/run.py" not in text  # the frames before the rank's entry


def test_a_stopped_rank_is_missing_and_its_stack_not_available() -> None:
    why = "its process (pid 7) is stopped (SIGSTOP or a debugger)"
    answers = Answers({0: answer(0, IN_ALL_REDUCE, entry(9, True), entry(10, False))}, {1: why})
    found = explain(answers, [0, 1])
    assert found.blamed == [1]
    assert found.headline == (
        "rank 1 is missing from all_reduce #10 of the default group, which rank 0 entered; "
        f"rank 1: its stack is not available ({why})"
    )


def test_every_rank_in_a_collective_none_completed_blames_no_one() -> None:
    nccl = {"profiling_name": "nccl:reduce_scatter", "state": "started"}
    answers = Answers({r: answer(r, IN_ALL_REDUCE, entry(3, False, **nccl)) for r in (0, 1)}, {})
    found = explain(answers, [0, 1])
    assert found.blamed == []
    assert found.headline.startswith(
        "every rank entered reduce_scatter #3 of the default group and none completed it"
    )


def test_the_oldest_collective_in_flight_decides_and_p2p_and_completed_are_skipped() -> None:
    mesh = {"process_group": ["3", "mesh_dp"], "time_created_ns": 500}
    frs = {
        0: fr(entry(4, False, **mesh), entry(8, False), entry(1, False, is_p2p=True)),
        1: fr(entry(3, True, **mesh), entry(8, False, state="completed")),
    }
    found = stuck_collective(frs, [], [0, 1])
    assert found is not None and found.collective is not None
    assert found.collective.title() == "all_reduce #4 of process group 3 (mesh_dp)"
    assert (found.entered, found.never_entered) == ([0], [1])
    # A rank with no collective of that group at all (it never reached the mesh's first).
    frs[1] = fr(entry(8, False, state="completed"))
    lines = explain(Answers({r: answer(r, [], *frs[r]["entries"]) for r in frs}, {}), [0, 1])
    assert "  rank 1: never entered it (newest in the group: none)" in lines.lines
    assert stuck_collective({0: fr(entry(1, True))}, [], [0]) is None


def test_a_rendezvous_that_never_completed_names_the_rank_that_never_joined() -> None:
    answers = Answers({0: {"rank": 0, "stack": IN_RENDEZVOUS, "flight_recorder": fr()}}, {})
    answers.silent[1] = "no pid file: never started, or still starting"
    found = explain(answers, [0, 1], loading=True)
    assert found.blamed == [1]
    assert found.headline == (
        "the rendezvous never completed: rank 1 never joined the process group, which rank 0 "
        "waits in; rank 1: its stack is not available (no pid file: never started, or still "
        "starting)"
    )


def test_a_node_whose_ranks_all_wait_in_the_rendezvous_waits_for_other_nodes() -> None:
    answers = Answers({0: {"rank": 0, "stack": IN_RENDEZVOUS, "flight_recorder": fr()}}, {})
    found = explain(answers, [0], loading=True, world=2)
    assert found.blamed == [] and found.headline == (
        "the rendezvous never completed: every rank of this node waits in it, for the ranks "
        "of the other nodes"
    )


def test_the_rank_thread_answers_and_a_stopped_process_is_silent(tmp_path: Path) -> None:
    import torch  # noqa: F401 - imported, as in a rank, before the thread dumps

    from veri_tui.trainer.forensics import flight_recorder, start_responder

    fr_before, _ = flight_recorder()
    # as the answer's JSON holds them (tuples read back as lists)
    left_before = json.loads(json.dumps((fr_before or {}).get("entries") or []))
    (tmp_path / "pids").mkdir()
    write_pid(rank_pid_path(tmp_path, 0), os.getpid())
    start_responder(tmp_path, 0)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        write_pid(rank_pid_path(tmp_path, 1), sleeper.pid)
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_for(lambda: " T " in Path(f"/proc/{sleeper.pid}/stat").read_text(), 5, "stop")
        t0 = time.monotonic()
        got = collect(tmp_path, [0, 1, 2])
        took = time.monotonic() - t0
    finally:
        sleeper.kill()
        sleeper.wait()
    print(f"dump request answered in {took:.2f} s")
    assert list(got.dumps) == [0]
    stack = got.dumps[0]["stack"]
    assert any(f[2] == "collect" for f in stack)  # the main thread's frames, innermost last
    assert "stopped (SIGSTOP" in got.silent[1] and "no pid file" in got.silent[2]
    # No process group of this test's: the recorder holds only what an earlier test of this
    # worker's process left in torch's process-wide ring (none when run alone), or says why
    # there is none.
    assert ((got.dumps[0]["flight_recorder"] or {}).get("entries") or []) == left_before
    again = collect(tmp_path, [0], wait_s=2)  # a new request gets a new answer
    assert again.dumps[0]["request"] != got.dumps[0]["request"]


def test_a_flight_recorder_pickle_is_read_without_running_its_code(tmp_path: Path) -> None:
    data = pickle.dumps(fr(entry(1, True)))
    assert load_fr_pickle(data) == fr(entry(1, True))
    assert load_fr_pickle(pickle.dumps(Path("/etc"))) is None  # a global: refused
    assert load_fr_pickle(b"\x80\x04partial") is None


NCCL_LOG = (
    "[rank0]:[E1203 12:00:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=2, "
    "NumelOut=2, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.\n"
    "[rank0]:[E1203 12:00:07.465150152 ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg)"
    " Rank 0] Exception (either an error or timeout) detected by watchdog at work: 57, last "
    "enqueued NCCL work: 58, last completed NCCL work: 56.\n"
    "terminate called after throwing an instance of 'c10::DistBackendError'\n"
)


def test_a_sigabrt_from_nccls_watchdog_is_comm_error_with_its_text(tmp_path: Path) -> None:
    now = time.time()
    torchrun_log(
        tmp_path,
        [summary_entry(0, -6, 6063, now), summary_entry(1, -15, 6064, now + 1)],
        closing=[6064],
    )
    log = tmp_path / "torchrun.log"
    log.write_text(NCCL_LOG + log.read_text())
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (0, "COMM_ERROR", "platform")
    assert err["summary"].startswith(
        "rank 0/2 (node 0, local_rank 0) failed: DistBackendError: Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE"
    )
    assert "(ended by NCCL's watchdog: SIGABRT)" in err["message"]
    # NCCL's own dump on timeout (TORCH_NCCL_DUMP_ON_TIMEOUT) names who never entered #57.
    (tmp_path / "forensics").mkdir()
    nccl = {"profiling_name": "nccl:all_reduce", "state": "started"}
    dump = fr(entry(56, True, **{**nccl, "state": "completed"}), entry(57, False, **nccl))
    (tmp_path / "forensics" / "nccl-trace-rank-0").write_bytes(pickle.dumps(dump))
    err = ncclabort.with_dumps(tmp_path, err, [0, 1])
    assert err["summary"].endswith(
        "; rank 1 is missing from all_reduce #57 of the default group, which rank 0 entered; "
        "rank 1: its stack is not available (no NCCL dump (its watchdog did not time out))"
    )


def test_a_sigabrt_without_nccl_words_stays_rank_lost(tmp_path: Path) -> None:
    torchrun_log(tmp_path, [summary_entry(1, -6, 6064, time.time())])
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"]) == (1, "RANK_LOST")
    assert "signal 6 (SIGABRT)" in err["summary"]


@pytest.mark.parametrize("user", [{}, {"TORCH_FR_DUMP_TEMP_FILE": "/x/dump-"}])
def test_nccl_dumps_go_into_the_job_folder_unless_the_user_chose(tmp_path: Path, user) -> None:
    env = forensics.environment(user, tmp_path)
    assert (tmp_path / "forensics").is_dir()
    ours = str(tmp_path / "forensics" / "nccl-trace-rank-")
    expected = user.get("TORCH_FR_DUMP_TEMP_FILE") or ours
    assert env.get("TORCH_FR_DUMP_TEMP_FILE") == expected
    assert json.dumps(env)  # plain strings, as an environment must be


def test_an_answer_keeps_what_is_in_flight_and_the_newest_of_each_group() -> None:
    from veri_tui.trainer.forensics import recent

    mesh = {"process_group": ["3", "mesh_dp"]}
    entries = [entry(1, False), *(entry(s, True) for s in range(2, 40)), entry(5, True, **mesh)]
    kept = recent(entries, keep=3)
    assert [(e["collective_seq_id"], e["process_group"][0]) for e in kept] == [
        (1, "0"), (37, "0"), (38, "0"), (39, "0"), (5, "3"),
    ]  # fmt: skip


class TwoRings:
    """torch's `_distributed_c10d` on a CUDA build, as the rank's thread calls it: NCCL's
    ring (`_dump_nccl_trace`, CUDA builds only) and gloo's (`_dump_fr_trace`) dumped apart."""

    def __init__(self, nccl: dict | Exception, gloo: dict) -> None:
        self.nccl, self.gloo = nccl, gloo

    def _dump_nccl_trace(self, includeStackTraces: bool = True) -> bytes:  # noqa: N803
        if isinstance(self.nccl, Exception):
            raise self.nccl
        return pickle.dumps(self.nccl)

    def _dump_fr_trace(self, includeStackTraces: bool = True) -> bytes:  # noqa: N803
        return pickle.dumps(self.gloo)


NCCL = {"profiling_name": "nccl:all_reduce", "state": "completed"}


def test_a_cuda_rank_answers_with_nccls_ring_merged_with_gloos() -> None:
    """A CUDA job records into NCCL's ring, which `_dump_fr_trace` (gloo's) never held: the
    answer used to read gloo's alone, and an NCCL hang showed no collective."""
    from veri_tui.trainer.forensics import flight_recorder

    nccl = fr(entry(9, True, **NCCL), entry(10, False, **{**NCCL, "state": "started"}))
    got, why = flight_recorder(TwoRings(nccl, fr()))
    assert why == "" and got is not None and got["dumps"] == ["_dump_nccl_trace", "_dump_fr_trace"]
    assert [(e["profiling_name"], e["collective_seq_id"]) for e in got["entries"]] == [
        ("nccl:all_reduce", 9), ("nccl:all_reduce", 10)]  # fmt: skip
    # An offload job (`cuda:nccl,cpu:gloo`): both rings, in the order created.
    gloo = fr(entry(2, False, time_created_ns=1_009))
    got, _ = flight_recorder(TwoRings(nccl, gloo))
    assert got is not None
    assert [e["profiling_name"] for e in got["entries"]] == [
        "nccl:all_reduce", "gloo:all_reduce", "nccl:all_reduce"]  # fmt: skip
    # A ring whose dump fails is named; the other's entries still come.
    got, why = flight_recorder(TwoRings(RuntimeError("NCCL is gone"), gloo))
    assert got is not None and len(got["entries"]) == 1
    assert why == "_dump_nccl_trace: RuntimeError: NCCL is gone"


def test_an_offload_hang_is_followed_per_backend() -> None:
    """The offload group numbers its NCCL and its gloo collectives apart: rank 1 passed NCCL's
    #10 but never entered gloo's #3 (the host-side grad-norm all-reduce), which rank 0 waits
    in. Read as one sequence (the old reading), rank 1's #10 hid that it never entered #3."""
    rank0 = [entry(10, True, **NCCL), entry(2, True), entry(3, False, time_created_ns=2_000)]
    rank1 = [entry(10, True, **NCCL), entry(2, True)]
    answers = Answers({0: answer(0, IN_ALL_REDUCE, *rank0), 1: answer(1, TRAINER_STACK, *rank1)},
                      {})  # fmt: skip
    found = explain(answers, [0, 1])
    assert found.blamed == [1]
    assert found.headline.startswith(
        "rank 1 never entered all_reduce (gloo) #3 of the default group, which rank 0 waits in"
    )
    assert "  rank 1: never entered it (newest in the group: all_reduce #2, completed)" in (
        found.lines
    )
