"""A rank ended by NCCL's watchdog: its own code and NCCL's words, not "killed by signal 6".

With `TORCH_NCCL_ASYNC_ERROR_HANDLING` (set by the supervisor,
veri_tui/jobfolder/failures/forensics.py) a NCCL error or collective timeout takes the rank down
with SIGABRT. torchrun's summary then says only `exitcode: -6 ... Signal 6 (SIGABRT)`, and no error
file is written (the abort is not a Python exception); NCCL's watchdog said what happened on the
rank's stderr, which is in torchrun.log, e.g.

    [rank0]:[E1203 12:00:07.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught
    collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, NumelIn=2, ...)
    ran for 600060 milliseconds before timing out.                    (one line)

`reclassify` gives such a rank COMM_ERROR (platform) with that text. With
`TORCH_NCCL_DUMP_ON_TIMEOUT` NCCL also writes its Flight Recorder to `forensics/`; `with_dumps`
reads those like the ranks' own answers to a dump request and adds which collective timed out and
who never entered it (veri_tui/jobfolder/failures/hangreport.py). Stdlib only.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.record import JobError
from veri_tui.jobfolder.contract.status import FailureCode
from veri_tui.jobfolder.failures.failure_rules import classify_text
from veri_tui.jobfolder.failures.forensics import Answers, nccl_dumps
from veri_tui.jobfolder.failures.hangreport import explain

#: What NCCL's watchdog (ProcessGroupNCCL.cpp) logs before it aborts the process.
_WATCHDOG = re.compile(
    r"(Watchdog caught collective operation timeout.*"
    r"|(?:Process group|NCCL) watchdog thread terminated with exception.*"
    r"|NCCL (?:error|communicator was aborted).*)"
)
_RANK = re.compile(r"^\s*(?:\[\d+\]\s*)?\[rank(\d+)\]:|\bRank (\d+)\]")


def watchdog_messages(log_text: str) -> dict[int, str]:
    """The first NCCL watchdog message of each rank in a torchrun log."""
    out: dict[int, str] = {}
    for line in log_text.splitlines():
        found = _WATCHDOG.search(line)
        rank = _RANK.search(line)
        if not found or not rank:
            continue
        out.setdefault(int(rank.group(1) or rank.group(2)), found.group(1).strip())
    return out


def reclassify(candidates: Sequence[Any], log_text: str) -> None:
    """Give every SIGABRTed rank that NCCL's watchdog spoke for its code and text (in place:
    the candidates of veri_tui/jobfolder/failures/failures.py's torchrun summary)."""
    said = watchdog_messages(log_text) if "NCCL" in log_text else {}
    for cand in candidates:
        if cand.signum != signal.SIGABRT or cand.rank not in said:
            continue
        text = said[cand.rank]
        code, peer = classify_text("", text)
        cand.code = code if code != FailureCode.UNKNOWN else FailureCode.COMM_ERROR
        cand.peer = peer
        cand.type = "DistBackendError"
        cand.message = f"{text} (ended by NCCL's watchdog: SIGABRT)"


def with_dumps(job_dir: Path, error: JobError, ranks: list[int]) -> JobError:
    """A COMM_ERROR with NCCL's own Flight Recorder dumps in the job folder: the collective
    and the ranks missing from it added to the summary and the traceback."""
    dumps = nccl_dumps(job_dir)
    if error.get("code") != FailureCode.COMM_ERROR or not dumps:
        return error
    silent = {r: "no NCCL dump (its watchdog did not time out)" for r in ranks if r not in dumps}
    found = explain(Answers(dumps, silent), ranks)
    if found.headline:
        error["summary"] = f"{error.get('summary', '')}; {found.headline}"
    lines = [ln for ln in found.lines if not ln.startswith("      ")]  # no stacks in them
    error["traceback"] = "\n".join([str(error.get("traceback") or ""), *lines]).strip("\n")
    return error
