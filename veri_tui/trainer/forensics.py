"""A rank's answer to the supervisor's dump request: its Flight Recorder and its Python stack.

When the hang watchdog (veri_tui/jobfolder/supervise/watchdog.py) sees no rank advance, it writes a
request id to `forensics/request` in the job folder (veri_tui/jobfolder/failures/forensics.py)
BEFORE it ends anything. Every rank runs one daemon thread, started before the rank joins its
process group, that checks that file four times a second and answers a new id with
`forensics/rank-<r>.json`: the main thread's Python stack (where the rank stands: in a collective,
in its data, in a wait of its own) and torch's Flight Recorder dumps (the collectives this process
entered, per process group, with sequence numbers, sizes and whether each completed): NCCL's and
gloo's, merged, since each backend records into a ring of its own (`DUMPS`), when
`TORCH_FR_BUFFER_SIZE` is set, which the supervisor does. This is the NCCL dump a hang report reads:
the watchdog asks before the process groups' timeout (veri_tui/jobfolder/supervise/watchdog.py
keeps it below), so NCCL's own dump on timeout never comes.

A thread rather than a signal handler: a Python signal handler runs only between bytecodes of
the main thread, which a rank blocked in a collective never reaches, while this thread runs
whenever the main thread waits with the GIL released (gloo and NCCL waits, the rendezvous,
sleeps, I/O; checked on torch 2.13). A stopped process (SIGSTOP) cannot answer at all: the
supervisor reads the missing rank from its peers' dumps, and its stack from faulthandler, which
this module registers on veri_tui/jobfolder/failures/stackdump.py's signal (that module says how).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.atomic import write_text_atomic
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.jobfolder.failures.flightrec import backend_of
from veri_tui.jobfolder.failures.forensics import load_fr_pickle, read_request_id, request_path
from veri_tui.jobfolder.failures.stackdump import STACK_SIGNAL, header, stack_path

POLL_S = 0.25  # a request is answered within this, plus the dump itself (milliseconds)
KEEP_PER_GROUP = 32  # completed collectives kept per process group in an answer


def main_stack() -> list[list[Any]]:
    """The main thread's stack, outermost first: [file, line, function] per frame."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return []
    return [[f.filename, f.lineno, f.name] for f in traceback.extract_stack(frame)]


#: torch's Flight Recorder dumps, each its own ring (read in torch's source, 2.11 and 2.13):
#: `_dump_nccl_trace` the NCCL process groups' (FlightRecorder<at::cuda::CUDAEvent>, only in
#: builds with NCCL), `_dump_fr_trace` gloo's (FlightRecorder<c10::Event>). A CUDA job records
#: into the first; a cpu_offload job runs `cuda:nccl,cpu:gloo` and records into both.
DUMPS = ("_dump_nccl_trace", "_dump_fr_trace")


def flight_recorder(c10d: Any = None) -> tuple[dict[str, Any] | None, str]:
    """Every Flight Recorder this torch has (`DUMPS`), merged: the collectives of every
    process group of this process and both backends, or (None, why not). ``c10d``: torch's
    `_distributed_c10d` (imported when None). Without the collectives' call sites: resolving
    them took 8.0 s for 2000 entries on this 2-core machine, against 0.12 s without
    (benchmarks/bench_flight_recorder.py), and the main thread's stack says where it waits.
    A dump that fails is named in the reason while the others' entries are kept."""
    if c10d is None:
        if "torch" not in sys.modules:  # never the first import of torch, from this thread
            return None, "torch is not imported yet"
        try:
            import torch._C._distributed_c10d as c10d
        except Exception as exc:
            return None, f"torch.distributed unavailable: {type(exc).__name__}: {exc}"
    found = [(name, fn) for name in DUMPS if (fn := getattr(c10d, name, None)) is not None]
    if not found:
        return None, "this torch has no Flight Recorder dump"
    parts, why = [], []
    for name, dump in found:
        try:
            fr = load_fr_pickle(dump(includeStackTraces=False))
        except Exception as exc:  # a dump must never take the rank down
            why.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if fr is None:
            why.append(f"{name}: the dump could not be read")
        else:
            parts.append((name, fr))
    if not parts:
        return None, "; ".join(why)
    fr = merge(parts)
    fr["entries"] = recent(fr.get("entries") or [])
    return fr, "; ".join(why)


def merge(parts: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One dump of several rings: their entries in the order created (each keeps its
    backend in `profiling_name`, e.g. `nccl:all_reduce`: sequence numbers count per backend),
    their process groups' configs together, `dumps` naming where they came from. An entry
    two rings both hold (a torch that records a backend twice) is kept once."""
    out: dict[str, Any] = {"version": parts[0][1].get("version"), "pg_config": {},
                           "entries": [], "dumps": [name for name, _ in parts]}  # fmt: skip
    seen = set()
    for _, fr in parts:
        out["pg_config"].update(fr.get("pg_config") or {})
        for e in fr.get("entries") or []:
            key = (str(e.get("process_group")), e.get("profiling_name"),
                   e.get("collective_seq_id"), e.get("p2p_seq_id"), e.get("is_p2p"))  # fmt: skip
            if key not in seen:
                seen.add(key)
                out["entries"].append(e)
    out["entries"].sort(key=lambda e: int(e.get("time_created_ns") or 0))
    return out


def recent(entries: list[dict[str, Any]], keep: int = KEEP_PER_GROUP) -> list[dict[str, Any]]:
    """Every collective still in flight and the newest ``keep`` of each process group and
    backend (what the report reads: a full ring of 2000 entries is about 1 MB of JSON)."""
    seen: dict[Any, int] = {}
    out = []
    for e in reversed(entries):
        group = (*(e.get("process_group") or ()), backend_of(e))  # each backend's own count
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= keep or not e.get("retired"):
            out.append(e)
    return out[::-1]


def answer(job_dir: Path, rank: int, request: str) -> Path:
    """Write this rank's answer to ``request``: `forensics/rank-<r>.json`."""
    fr, why = flight_recorder()
    record = {
        "request": request,
        "rank": rank,
        "pid": os.getpid(),
        "time_ns": time.time_ns(),
        "stack": main_stack(),
        "flight_recorder": fr,
        "flight_recorder_error": why,
    }
    path = JobLayout(job_dir).rank_forensics(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record))
    return path


class DumpResponder:
    """The rank's thread that answers dump requests (one per process)."""

    def __init__(self, job_dir: Path, rank: int) -> None:
        self.job_dir, self.rank = Path(job_dir), rank
        self.request_path = request_path(job_dir)
        # A request already there is an earlier one (this attempt's requests come later).
        self.answered = read_request_id(self.request_path)
        self.thread = threading.Thread(target=self._run, name="veri-forensics", daemon=True)

    def start(self) -> DumpResponder:
        self.thread.start()
        register_stack_dump(self.job_dir, self.rank)
        return self

    def _run(self) -> None:
        while True:
            time.sleep(POLL_S)
            request = read_request_id(self.request_path)
            if request and request != self.answered:
                self.answered = request
                try:
                    answer(self.job_dir, self.rank, request)
                except Exception:  # noqa: BLE001 - the thread must outlive any one answer
                    pass  # (a full or vanished disk): the supervisor reports "no answer"


def register_stack_dump(job_dir: Path, rank: int) -> None:
    """Let the supervisor read this rank's stack while it is stopped: faulthandler writes
    every thread's frames to `forensics/stack-<r>.txt` on STACK_SIGNAL
    (veri_tui/jobfolder/failures/stackdump.py). The file is written only after the handler is in
    place: the supervisor sends the signal only to a rank whose file names its main thread (the
    signal's default would end it)."""
    path = stack_path(job_dir, rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        out = path.open("w")  # kept open for the process's life: faulthandler writes to its fd
        faulthandler.register(STACK_SIGNAL, file=out, all_threads=True, chain=False)
        out.write(header(threading.main_thread().ident or 0))
        out.flush()
    except (OSError, RuntimeError, ValueError):
        pass  # no stack for a stopped rank; the report then says it is not available


def start_responder(job_dir: Path, rank: int) -> DumpResponder:
    """Start the rank's dump responder (veri_tui/trainer/loop.py, before the process group)."""
    return DumpResponder(job_dir, rank).start()
