"""The one table of failure rules (veri_tui/jobfolder/failures/failure_rules.py), on what real
torchrun 2.13 jobs left behind and on the pattern cases that used to go wrong.

tests/fixtures/failures/<case>/ holds the files of real failed 2-rank CPU jobs of the tiny
model, run through the supervisor by scripts/capture_failure_fixtures.py (captured.json says
how). Both paths are checked on them: the rank's (the code in failures/rank-<r>.json) and the
supervisor's (error.json texts, torchrun's summary), which must agree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from veri_tui.jobfolder.contract.errors import ConfigError, TrainerError
from veri_tui.jobfolder.contract.status import ATTRIBUTION
from veri_tui.jobfolder.failures import failure_rules, failures
from veri_tui.jobfolder.failures.failure_rules import (
    PEER_PHRASES,
    classify_text,
    qualify,
    split_type,
)
from veri_tui.trainer import report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "failures"
#: case -> (blamed rank, code, attribution); None: the earliest of the ranks' records
EXPECTED = {
    "kill": (1, "RANK_LOST", "platform"),
    "raise": (1, "UNKNOWN", "pending"),
    "oom": (1, "CUDA_OOM", "customer"),
    "ckpt": (0, "UNKNOWN", "pending"),
    "peer": (1, "RANK_LOST", "platform"),
    "late_kill": (1, "RANK_LOST", "platform"),  # torchrun saw rank 0 fail first
    "config": (None, "CONFIG_ERROR", "customer"),
}


@pytest.fixture(params=sorted(EXPECTED))
def case(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A captured job folder, read in the time zone it was captured in (torchrun's summary
    prints local time)."""
    folder = FIXTURES / request.param
    offset = json.loads((folder / "captured.json").read_text())["utc_offset"]  # "+0000"
    before = os.environ.get("TZ")
    os.environ["TZ"] = f"UTC{'-' if offset[0] == '+' else '+'}{offset[1:3]}:{offset[3:]}"
    time.tzset()
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def _records(folder: Path) -> dict[int, dict]:
    out = {}
    for path in (folder / "failures").glob("rank-*.json"):
        rec = json.loads(path.read_text())
        out[rec["rank"]] = rec
    return out


def test_every_case_was_captured_from_torch_2_13() -> None:
    for name in EXPECTED:
        meta = json.loads((FIXTURES / name / "captured.json").read_text())
        assert meta["torch"].startswith("2.13") and meta["case"] == name


def test_the_report_blames_the_rank_that_started_it(case: Path) -> None:
    rank, code, attribution = EXPECTED[case.name]
    if rank is None:
        records = _records(case)
        rank = min(records, key=lambda r: records[r]["time_ns"])
    err = failures.analyze(case, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (rank, code, attribution)
    assert err["summary"].startswith(f"rank {rank}/2 (node 0, local_rank {rank}) failed: ")
    assert ATTRIBUTION[err["code"]] == err["attribution"]


def test_rank_records_agree_with_the_text_rules(case: Path) -> None:
    """What a rank decided with the exception in hand is what the table says of its text."""
    for rec in _records(case).values():
        qualified = qualify(rec["type"], rec["traceback"])
        got = classify_text(qualified, rec["message"])
        assert got == (rec["code"], rec["peer_failure"]), (case.name, rec["rank"])


def test_error_json_texts_classify_like_the_rank_that_wrote_them(case: Path) -> None:
    records = _records(case)
    elastic = failures.elastic_records(case / "elastic", nproc_per_node=2)
    for cand in elastic:
        rec = records[cand.rank]
        assert (cand.code, cand.peer) == (rec["code"], rec["peer_failure"]), case.name


def test_a_real_error_json_names_the_trainers_class_only_qualified() -> None:
    folder = FIXTURES / "config"
    for path in folder.glob("elastic/*/attempt_*/*/error.json"):
        msg = json.loads(path.read_text())["message"]
        type_name, _ = split_type(msg["message"])
        assert type_name == "ConfigError"  # torch elastic writes type(e).__name__ ...
        # ... and its traceback's last line says whose class it is.
        assert qualify(type_name, msg["extraInfo"]["py_callstack"]) == "trainer.errors.ConfigError"
    cands = failures.elastic_records(folder / "elastic", nproc_per_node=2)
    assert {c.code for c in cands} == {"CONFIG_ERROR"}


def test_a_signal_kill_is_known_from_the_summary_and_the_survivor_is_a_peer() -> None:
    for name in ("kill", "peer"):
        by_rank = {c.rank: c for c in failures.summary_records(FIXTURES / name / "torchrun.log", 2)}
        assert (by_rank[1].code, by_rank[1].signum, by_rank[1].peer) == ("RANK_LOST", 9, False)
        assert by_rank[1].message.startswith("killed by signal 9 (SIGKILL), pid ")
        assert by_rank[0].peer  # torchrun's own SIGTERM while shutting the group down


def test_a_rank_sigkilled_after_torchruns_sigterm_is_a_cause_unless_torchrun_killed_it(
    tmp_path: Path,
) -> None:
    """late_kill: torchrun saw rank 0 fail first and sent rank 1 its closing SIGTERM, yet
    rank 1 ended by SIGKILL, which torchrun never sent: rank 1 is the cause (as an OOM-killed
    rank is). Had torchrun SIGKILLed it after its grace, it would be a victim."""
    log = (FIXTURES / "late_kill" / "torchrun.log").read_text(encoding="utf-8")
    by_rank = {
        c.rank: c for c in failures.summary_records(FIXTURES / "late_kill" / "torchrun.log", 2)
    }
    pid = int(re.search(r"Sending process (\d+) closing signal SIGTERM", log)[1])
    assert by_rank[1].message == f"killed by signal 9 (SIGKILL), pid {pid}"
    assert (by_rank[1].signum, by_rank[1].peer) == (9, False)
    assert not by_rank[0].peer  # rank 0 exited 1 on its own (its gloo error)
    again = tmp_path / "torchrun.log"
    again.write_text(log + f"Sending process {pid} closing signal SIGKILL\n", encoding="utf-8")
    assert {c.rank: c for c in failures.summary_records(again, 2)}[1].peer


def test_the_survivors_gloo_error_alone_is_a_platform_comm_error(tmp_path: Path) -> None:
    """Only the surviving rank's real error.json (its peer's death left no file)."""
    shutil.copytree(FIXTURES / "peer" / "elastic", tmp_path / "elastic")
    (cand,) = failures.elastic_records(tmp_path / "elastic", nproc_per_node=2)
    assert "Connection closed by peer" in cand.message
    assert (cand.rank, cand.code, cand.peer) == (0, "COMM_ERROR", True)
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (0, "COMM_ERROR", "platform")


# -- pattern cases --------------------------------------------------------------------------


def test_xid_is_a_word_not_a_substring() -> None:
    assert classify_text("RuntimeError", "oxidation on the heat sink")[0] == "UNKNOWN"
    assert classify_text("RuntimeError", "Xid 79 reported by GPU 3") == ("HARDWARE_ERROR", False)
    assert classify_text("", "NVRM: Xid (PCI:0000:3b:00): 79, pid=123")[0] == "HARDWARE_ERROR"


def test_only_the_trainers_own_classes_claim_customer_codes_by_type() -> None:
    assert classify_text(*split_type("somelib.ConfigError: bad key")) == ("UNKNOWN", False)
    assert classify_text(*split_type("ConfigError: bad key")) == ("UNKNOWN", False)  # bare
    got = classify_text(*split_type("trainer.errors.ConfigError: lora_rank: must be 0"))
    assert got == ("CONFIG_ERROR", False)
    assert classify_text("trainer.errors.DataError", "x.jsonl line 3")[0] == "DATA_ERROR"


NCCL_OOM = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:3356, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
    "NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
    "Cuda failure 'out of memory'"
)


@pytest.mark.parametrize(
    "text",
    [
        NCCL_OOM,
        "torch.distributed.DistBackendError: NCCL error: CUDA out of memory; the NCCL "
        "communicator was aborted",
        "torch.distributed.DistBackendError: OUT OF MEMORY in ncclCommInitRank",
    ],
)
def test_out_of_memory_inside_nccl_is_cuda_oom_not_a_peer(text: str) -> None:
    assert classify_text(*split_type(text)) == ("CUDA_OOM", False)


def _error_json(job: Path, rank: int, message: str, stack_last: str, ts: int) -> None:
    folder = job / "elastic" / "r_x" / "attempt_0" / str(rank)
    folder.mkdir(parents=True)
    stack = f"Traceback (most recent call last):\n  ...\n{stack_last}\n"
    body = {"message": message, "extraInfo": {"py_callstack": stack, "timestamp": str(ts)}}
    (folder / "error.json").write_text(json.dumps({"message": body}))


def test_nccl_oom_is_blamed_even_when_a_peer_failed_a_second_earlier(tmp_path: Path) -> None:
    gloo = "RuntimeError: [gloo] Connection closed by peer"
    _error_json(tmp_path, 0, gloo, gloo, 1_795_991_955)
    bare = NCCL_OOM.replace("torch.distributed.", "", 1)  # as torch elastic's message has it
    _error_json(tmp_path, 1, bare, NCCL_OOM, 1_795_991_956)
    err = failures.analyze(tmp_path, world_size=2, nproc_per_node=2, exit_code=1)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "CUDA_OOM", "customer")


@pytest.mark.parametrize("phrase", PEER_PHRASES)
def test_each_peer_phrase_is_a_peer_failure_on_both_paths(phrase: str) -> None:
    text = f"[c10d] {phrase.upper()} while waiting for rank 3"
    assert classify_text(*split_type(f"RuntimeError: {text}")) == ("COMM_ERROR", True)
    assert report.classify(RuntimeError(text)) == ("COMM_ERROR", True)
    assert failure_rules.is_peer_text(f"... {phrase} ...")
    assert not failure_rules.is_peer_text(f"... x{phrase}x ...")  # bounded by word edges


# -- the rank's path, with real exceptions ---------------------------------------------------


def test_rank_side_matches_types_along_the_mro_by_qualified_name() -> None:
    import torch

    foreign = type("ConfigError", (Exception,), {"__module__": "somelib"})
    assert report.classify(foreign("bad key")) == ("UNKNOWN", False)
    assert report.classify(ConfigError("bad key")) == ("CONFIG_ERROR", False)
    assert report.classify(torch.OutOfMemoryError("no text to go by")) == ("CUDA_OOM", False)
    network = torch.distributed.DistNetworkError("rendezvous store went away")
    assert report.classify(network) == ("COMM_ERROR", True)
    assert report.classify(RuntimeError("oxidation")) == ("UNKNOWN", False)
    assert report.classify(RuntimeError("Xid 79")) == ("HARDWARE_ERROR", False)


def test_rank_side_nccl_oom_is_cuda_oom_not_a_peer() -> None:
    import torch

    exc = torch.distributed.DistBackendError(NCCL_OOM.split(": ", 1)[1])
    assert report.classify(exc) == ("CUDA_OOM", False)


def test_a_trainer_error_wrapping_a_peers_failure_stays_a_peer_failure() -> None:
    """checkpoint.py wraps a failed save in TrainerError(<code of the cause>, ...)."""
    try:
        try:
            raise RuntimeError("[gloo] Connection closed by peer")
        except RuntimeError as cause:
            raise TrainerError("COMM_ERROR", "checkpoint step-2 failed") from cause
    except TrainerError as exc:
        assert report.classify(exc) == ("COMM_ERROR", True)
    assert report.classify(TrainerError("COMM_ERROR", "nothing below")) == ("COMM_ERROR", False)


def test_the_rule_table_is_written_once() -> None:
    """No module of veri_tui/jobfolder/ or veri_tui/trainer/ keeps its own copy of a phrase, pattern
    or type."""
    folders = [
        Path(failures.__file__).parent,
        Path(failures.__file__).parents[1] / "trainer",
    ]  # veri_tui/trainer
    for needle in ('"connection closed"', '"out of memory"', '"xid"', '"torch.OutOfMemoryError"'):
        # A dict key of the same spelling (veri_tui/trainer/gpuhealth.py's {"xid": 79}, and its
        # reads e["xid"], facts.get("xid") in veri_tui/jobfolder/probe/probe_health.py) is no rule.
        phrase = re.compile(re.escape(needle) + r"(?!\s*[:\])])")
        holders = [p.name for d in folders for p in d.glob("*.py") if phrase.search(p.read_text())]
        assert holders == ["failure_rules.py"], (needle, holders)
