"""veri_tui.jobfolder.failures.failures on hand-written job folders: every way torchrun leaves a
failure behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from veri_tui.jobfolder.failures import failures

T0 = 1_795_991_955  # whole seconds, as torch elastic writes them


def rank_record(
    job: Path,
    rank: int,
    time_ns: int,
    type_: str,
    code: str,
    message: str,
    peer: bool = False,
    world: int = 4,
) -> None:
    (job / "failures").mkdir(parents=True, exist_ok=True)
    rec = {
        "rank": rank,
        "local_rank": rank,
        "node": 0,
        "world_size": world,
        "time_ns": time_ns,
        "type": type_,
        "code": code,
        "message": message,
        "peer_failure": peer,
        "traceback": f"Traceback (most recent call last):\n  rank {rank}\n{type_}: {message}",
    }
    (job / "failures" / f"rank-{rank}.json").write_text(json.dumps(rec))


def elastic_file(
    job: Path,
    local_rank: int,
    message: str,
    ts: int,
    raw: str | None = None,
    module: str = "",
) -> Path:
    """An error.json as torch elastic writes it: the message names the bare type, the
    traceback's last line the module-qualified one (``module``; empty for builtins)."""
    d = job / "elastic" / "abc_xyz" / "attempt_0" / str(local_rank)
    d.mkdir(parents=True, exist_ok=True)
    last = f"{module}.{message}" if module else message
    body = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": f"Traceback ...\n{last}\n", "timestamp": str(ts)},
        }
    }
    (d / "error.json").write_text(raw if raw is not None else json.dumps(body))
    return d / "error.json"


def summary_entry(
    rank: int,
    exitcode: int,
    pid: int,
    when: float,
    error_file: str = "<N/A>",
    tb: str | None = None,
) -> str:
    stamp = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(when))
    sig = {-9: "  (SIGKILL)", -15: "  (SIGTERM)"}.get(exitcode, " ")
    tb = tb or (f"Signal {-exitcode} received by PID {pid}" if exitcode < 0 else "<see file>")
    return (
        f"[{rank}]:\n  time      : {stamp}\n  host      : localhost\n"
        f"  rank      : {rank} (local_rank: {rank})\n"
        f"  exitcode  : {exitcode} (pid: {pid}){sig}\n"
        f"  error_file: {error_file}\n  traceback : {tb}\n"
    )


def torchrun_log(job: Path, entries: list[str], closing: list[int] = ()) -> None:
    head = "".join(
        f"W1129 22:39:21.486000 6019 api.py:1028] Sending process {p} closing signal SIGTERM\n"
        for p in closing
    )
    text = head + "=" * 40 + "\ntrainer FAILED\n" + "-" * 40 + "\nFailures:\n"
    text += "".join(entries[1:]) or "  <NO_OTHER_FAILURES>\n"
    text += "-" * 40 + "\nRoot Cause (first observed failure):\n" + entries[0] + "=" * 40 + "\n"
    (job / "torchrun.log").write_text(text)


def test_tie_in_whole_seconds_is_broken_by_the_trainer_clock(tmp_path: Path) -> None:
    # torchrun sees both in the same second and would name rank 1; the ns records say rank 3.
    for r, msg in ((1, "DataError: bad row"), (3, "OutOfMemoryError: CUDA out of memory")):
        elastic_file(tmp_path, r, msg, T0)
    rank_record(tmp_path, 1, T0 * 10**9 + 900_000_000, "DataError", "DATA_ERROR", "bad row")
    rank_record(
        tmp_path,
        3,
        T0 * 10**9 + 100_000_000,
        "OutOfMemoryError",
        "CUDA_OOM",
        "CUDA out of memory. Tried to allocate 2.00 GiB",
    )
    err = failures.analyze(tmp_path, world_size=4, nproc_per_node=4, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (3, "CUDA_OOM", "customer")
    assert err["summary"] == (
        "rank 3/4 (node 0, local_rank 3) failed: OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB"
    )
    assert "rank 3" in err["traceback"]


def test_peers_that_saw_a_connection_close_are_not_blamed(tmp_path: Path) -> None:
    # Ranks 1 and 3 hit "Connection closed" a second BEFORE by torchrun's clock rounding.
    elastic_file(tmp_path, 1, "RuntimeError: [gloo] Connection closed by peer", T0)
    elastic_file(tmp_path, 3, "RuntimeError: Connection reset by peer", T0)
    elastic_file(tmp_path, 2, "OutOfMemoryError: CUDA out of memory", T0 + 1)
    err = failures.analyze(tmp_path, world_size=4, nproc_per_node=4, exit_code=1)
    assert (err["rank"], err["code"]) == (2, "CUDA_OOM")
    assert err["summary"].startswith("rank 2/4 (node 0, local_rank 2) failed: OutOfMemoryError")


def test_peer_flag_in_trainer_records_demotes_an_earlier_record(tmp_path: Path) -> None:
    rank_record(tmp_path, 0, T0 * 10**9, "RuntimeError", "COMM_ERROR", "timed out", peer=True)
    rank_record(tmp_path, 2, T0 * 10**9 + 5, "DataError", "DATA_ERROR", "sft.jsonl line 7: x")
    err = failures.analyze(tmp_path, world_size=4, nproc_per_node=4, exit_code=1)
    assert (err["rank"], err["code"], err["message"]) == (2, "DATA_ERROR", "sft.jsonl line 7: x")


def test_only_peer_failures_still_name_the_earliest_as_comm_error(tmp_path: Path) -> None:
    elastic_file(tmp_path, 1, "RuntimeError: Connection closed by peer", T0 + 1)
    elastic_file(tmp_path, 0, "RuntimeError: Connection closed by peer", T0)
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (0, "COMM_ERROR", "platform")


def test_signal_kill_is_rank_lost_and_torchruns_own_sigterm_is_not_blamed(tmp_path: Path) -> None:
    now = time.time()
    torchrun_log(
        tmp_path,
        [summary_entry(1, -9, 6064, now), summary_entry(0, -15, 6063, now)],
        closing=[6063],
    )
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "RANK_LOST", "platform")
    assert err["summary"] == (
        "rank 1/2 (node 0, local_rank 1) failed: killed by signal 9 (SIGKILL), pid 6064"
    )
    assert "Signal 9" in err["traceback"]


def test_signal_kill_beats_peers_whose_trainer_records_say_connection_closed(tmp_path: Path):
    now = time.time()
    rank_record(
        tmp_path,
        0,
        int(now * 1e9),
        "RuntimeError",
        "COMM_ERROR",
        "[gloo] Connection closed by peer",
        peer=True,
        world=2,
    )
    torchrun_log(tmp_path, [summary_entry(1, -9, 77, now), summary_entry(0, 1, 76, now)])
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"]) == (1, "RANK_LOST")


def test_base_exception_seen_only_by_the_trainer_record(tmp_path: Path) -> None:
    # DCP's CheckpointException is a BaseException: `record` writes no error.json for it.
    now = time.time()
    rank_record(
        tmp_path,
        1,
        int(now * 1e9),
        "CheckpointException",
        "UNKNOWN",
        "CheckpointException ranks:dict_keys([1])",
        world=2,
    )
    torchrun_log(
        tmp_path, [summary_entry(1, 1, 88, now), summary_entry(0, -15, 87, now)], closing=[87]
    )
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "UNKNOWN", "pending")
    assert "CheckpointException" in err["summary"]


def test_partial_error_json_is_skipped_and_the_summary_covers_the_rank(tmp_path: Path) -> None:
    elastic_file(tmp_path, 0, "", T0, raw='{"message": {"message": "OutOfMemoryError: CU')
    path = elastic_file(tmp_path, 1, "ValueError: boom", T0, raw="")
    torchrun_log(tmp_path, [summary_entry(1, 1, 99, T0, error_file=str(path))])
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    # Neither file is readable: rank 1 is known only from torchrun's summary.
    assert (err["rank"], err["code"], err["attribution"]) == (1, "UNKNOWN", "pending")
    assert err["summary"] == "rank 1/2 (node 0, local_rank 1) failed: exited with code 1, pid 99"


def test_elastic_only_failure_keeps_its_type_and_traceback(tmp_path: Path) -> None:
    msg = "ModelLoadError: /m/model.safetensors: missing"
    elastic_file(tmp_path, 1, msg, T0, module="trainer.errors")
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "MODEL_LOAD_ERROR", "customer")
    assert err["traceback"].startswith("Traceback")
    assert err["summary"].endswith("failed: ModelLoadError: /m/model.safetensors: missing")


def test_a_same_named_class_from_another_module_is_not_the_customers(tmp_path: Path) -> None:
    elastic_file(tmp_path, 1, "ModelLoadError: weights missing", T0, module="somelib.hub")
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "UNKNOWN", "pending")


def test_append_report_starts_on_its_own_line(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text('plan: dp=2 ...\n{"step": 1, "loss": 3.')  # a rank died mid-line
    err = {
        "summary": "rank 1/2 (node 0, local_rank 1) failed: X: y",
        "traceback": "Traceback\nX: y",
    }
    failures.append_report(log, err, "plan: dp=2 ...")
    assert log.read_text().splitlines()[-4:] == [
        "rank 1/2 (node 0, local_rank 1) failed: X: y",
        "plan: dp=2 ...",
        "Traceback",
        "X: y",
    ]


def test_a_supervisor_crash_still_ends_the_job_as_failed(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"status": "pending", "spec": {}}))  # no gpu_count: unusable
    proc = subprocess.run(
        [sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(job)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode != 0 and "KeyError" in proc.stderr
    rec = json.loads(job.read_text())
    assert rec["status"] == "failed" and rec["exit_code"] == 1
    assert (rec["error"]["code"], rec["error"]["attribution"]) == ("UNKNOWN", "pending")
    assert rec["error"]["summary"] == "job failed: supervisor error: KeyError: 'gpu_count'"
