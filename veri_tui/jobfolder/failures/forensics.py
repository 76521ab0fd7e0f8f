"""Ask every rank for its Flight Recorder dump and Python stack, before a hung job is ended.

The supervisor's side of the dump request (the rank's side: veri_tui/trainer/forensics.py).
`collect` writes a fresh request id to `forensics/request`, then waits (at most `DUMP_WAIT_S`) until
every rank has answered with `forensics/rank-<r>.json` or cannot answer: a stopped process
(state T: SIGSTOP, a debugger), one in uninterruptible sleep (D: a hung driver or file system),
one that exited, or one that never wrote its pid. A stopped rank's stack is then read from its
process by veri_tui/jobfolder/failures/stackdump.py. The answers and the reasons are analysed by
veri_tui/jobfolder/failures/flightrec.py into the failure report.

`environment` gives the ranks the variables this needs: the Flight Recorder's ring buffer
(`TORCH_FR_BUFFER_SIZE`, read by gloo and NCCL process groups alike), and for NCCL its async
error handling and its own dump on timeout into this folder (`TORCH_NCCL_DUMP_ON_TIMEOUT`,
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE`), each only where the user has not set it (docs/jobs.md,
Hang forensics). Stdlib only, like the supervisor.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import time
from collections.abc import Container, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from veri_tui.jobfolder.contract.layout import FORENSICS, JobLayout
from veri_tui.jobfolder.contract.procs import rank_pid_path, read_pid
from veri_tui.jobfolder.failures.stackdump import read_stopped

DUMP_WAIT_S = 5.0  # a live rank answers in well under a second (it polls 4 times a second)
FR_ENTRIES = 2000  # collectives kept per process: a few steps of FSDP2 on a deep model
STOPPED = "is stopped (SIGSTOP or a debugger)"  # state T: its stack can be read (stackdump.py)
NCCL_DUMP_PREFIX = "nccl-trace-rank-"  # NCCL appends the rank
#: Set for the ranks unless already in the environment. TORCH_NCCL_ASYNC_ERROR_HANDLING=3: a
#: NCCL error or timeout takes the process down (SIGABRT, with NCCL's text on stderr) without
#: first aborting the communicator, which can itself hang on a wedged GPU; torch's default
#: since 2.2, set so that the behaviour does not depend on the release.
NCCL_DEFAULTS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


def request_path(job_dir: Path | str) -> Path:
    """`forensics/request`: the id of the newest dump request."""
    return Path(job_dir) / FORENSICS / "request"


def read_request_id(path: Path) -> str:
    """The request id in ``path``, or "" (no request yet)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def environment(env: Mapping[str, str], job_dir: Path) -> dict[str, str]:
    """``env`` plus the Flight Recorder and NCCL settings the forensics need (the user's own
    values win); creates the folder NCCL dumps into."""
    folder = Path(job_dir) / FORENSICS
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        pass  # no folder to dump into: NCCL then logs that its dump failed, nothing worse
    out = dict(env)
    if "TORCH_FR_BUFFER_SIZE" not in out and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in out:
        out["TORCH_FR_BUFFER_SIZE"] = str(FR_ENTRIES)
    for key, value in NCCL_DEFAULTS.items():
        out.setdefault(key, value)
    if "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in out and "TORCH_FR_DUMP_TEMP_FILE" not in out:
        prefix = str(folder / NCCL_DUMP_PREFIX)
        out.update(TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix, TORCH_FR_DUMP_TEMP_FILE=prefix)
    return out


class Answers(NamedTuple):
    """What each rank sent (its answer record), for each silent rank why not, and the stacks
    read from silent ranks' stopped processes (outermost frame first)."""

    dumps: dict[int, dict[str, Any]]
    silent: dict[int, str]
    stacks: dict[int, list[list[Any]]] = {}  # noqa: RUF012 - never mutated; each collect makes its own


def proc_state(pid: int | None) -> str | None:
    """The process's state letter in /proc (R, S, D, T, Z, ...), None when there is none."""
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return (stat.rsplit(")", 1)[-1].split() or ["?"])[0]


def process_state(job_dir: Path, rank: int) -> str:
    """Why rank ``rank`` may not answer: "" (it runs and can), else a reason."""
    pid = read_pid(rank_pid_path(job_dir, rank))
    if not pid:
        return "no pid file: never started, or still starting"
    state = proc_state(pid)
    if state is None:
        return f"exited (pid {pid})"
    if state == "T":
        return f"its process (pid {pid}) {STOPPED}"
    if state == "t":
        return f"its process (pid {pid}) is stopped by a debugger"
    if state == "D":
        return f"its process (pid {pid}) is in uninterruptible sleep (a hung driver or disk)"
    if state in ("Z", "X"):
        return f"exited (pid {pid})"
    return ""


def _answer(job_dir: Path, rank: int, request: str) -> dict[str, Any] | None:
    try:
        rec = json.loads(JobLayout(job_dir).rank_forensics(rank).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("request") == request else None


def collect(
    job_dir: Path,
    ranks: Iterable[int],
    wait_s: float = DUMP_WAIT_S,
    poll_s: float = 0.1,
    local: Container[int] | None = None,
) -> Answers:
    """Request a dump from ``ranks`` and gather the answers (at most ``wait_s`` seconds).
    ``local``: the ranks on this machine (default all), whose processes can be looked at;
    the others (a Slurm job's other nodes, answering through the shared folder) are waited
    for."""
    job_dir, ranks = Path(job_dir), list(ranks)
    request = f"{time.time_ns()}-{os.getpid()}"
    path = request_path(job_dir)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(".request.tmp")
    tmp.write_text(request + "\n")
    os.replace(tmp, path)
    dumps: dict[int, dict[str, Any]] = {}
    silent: dict[int, str] = {}
    deadline = time.monotonic() + wait_s
    while True:
        silent = {}
        for rank in ranks:
            if rank not in dumps and (got := _answer(job_dir, rank, request)) is not None:
                dumps[rank] = got
            if rank not in dumps:
                here = local is None or rank in local
                silent[rank] = process_state(job_dir, rank) if here else ""
        # Done when every rank answered or cannot (stopped, gone): "" means it still may.
        if all(silent.values()) or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    stacks = {}
    for rank, why in silent.items():  # a stopped rank's stack, read from its process
        if why.endswith(STOPPED) and (pid := read_pid(rank_pid_path(job_dir, rank))):
            if stack := read_stopped(job_dir, rank, pid):
                stacks[rank] = stack
    return Answers(
        dumps, {r: why or f"no answer within {wait_s:.0f} s" for r, why in silent.items()}, stacks
    )


class _NoGlobals(pickle.Unpickler):
    """Plain data only: the Flight Recorder's pickle holds dicts, lists, str and numbers."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name} in a Flight Recorder dump")


def load_fr_pickle(data: bytes) -> dict[str, Any] | None:
    """A Flight Recorder dump as NCCL writes it on timeout (or `_dump_fr_trace` returns)."""
    try:
        out = _NoGlobals(io.BytesIO(data)).load()
    except Exception:  # a partial or foreign file tells nothing
        return None
    return out if isinstance(out, dict) else None


def nccl_dumps(job_dir: Path) -> dict[int, dict[str, Any]]:
    """NCCL's own dumps on timeout (`forensics/nccl-trace-rank-<r>`), by rank."""
    out = {}
    for path in (Path(job_dir) / FORENSICS).glob(NCCL_DUMP_PREFIX + "*"):
        suffix = path.name[len(NCCL_DUMP_PREFIX) :]
        if suffix.isdigit() and (fr := load_fr_pickle(path.read_bytes())) is not None:
            out[int(suffix)] = {"rank": int(suffix), "stack": [], "flight_recorder": fr}
    return out
