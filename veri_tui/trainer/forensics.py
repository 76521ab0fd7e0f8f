"""A rank's answer to the supervisor's dump request: its Flight Recorder and its Python stack.

When the hang watchdog (veri_tui/jobfolder/watchdog.py) sees no rank advance, it writes a request id
to `forensics/request` in the job folder (veri_tui/jobfolder/forensics.py) BEFORE it ends anything.
Every rank runs one daemon thread, started before the rank joins its process group, that checks that
file four times a second and answers a new id with `forensics/rank-<r>.json`: the main
thread's Python stack (where the rank stands: in a collective, in its data, in a wait of its
own) and torch's Flight Recorder dump (the collectives this process entered, per process group,
with sequence numbers, sizes and whether each completed; gloo records it as NCCL does, when
`TORCH_FR_BUFFER_SIZE` is set, which the supervisor does).

A thread rather than a signal handler: a Python signal handler runs only between bytecodes of
the main thread, which a rank blocked in a collective never reaches, while this thread runs
whenever the main thread waits with the GIL released (gloo and NCCL waits, the rendezvous,
sleeps, I/O; checked on torch 2.13). A stopped process (SIGSTOP) cannot answer at all: the
supervisor reads the missing rank from its peers' dumps, and its stack from faulthandler, which
this module registers on veri_tui/jobfolder/stackdump.py's signal (that module says how).
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

from veri_tui.jobfolder.atomic import write_text_atomic
from veri_tui.jobfolder.forensics import load_fr_pickle, read_request_id, request_path
from veri_tui.jobfolder.layout import JobLayout
from veri_tui.jobfolder.stackdump import STACK_SIGNAL, header, stack_path

POLL_S = 0.25  # a request is answered within this, plus the dump itself (milliseconds)
KEEP_PER_GROUP = 32  # completed collectives kept per process group in an answer


def main_stack() -> list[list[Any]]:
    """The main thread's stack, outermost first: [file, line, function] per frame."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return []
    return [[f.filename, f.lineno, f.name] for f in traceback.extract_stack(frame)]


def flight_recorder() -> tuple[dict[str, Any] | None, str]:
    """torch's Flight Recorder dump (the collectives of every process group of this
    process), or (None, why not). `_dump_fr_trace` is what torch's own debug tooling calls
    (older CUDA builds: `_dump_nccl_trace`). Without the collectives' call sites: resolving
    them took 8.0 s for 2000 entries on this 2-core machine, against 0.12 s without
    (benchmarks/bench_flight_recorder.py), and the main thread's stack says where it waits."""
    if "torch" not in sys.modules:  # never the first import of torch, from this thread
        return None, "torch is not imported yet"
    try:
        import torch._C._distributed_c10d as c10d
    except Exception as exc:
        return None, f"torch.distributed unavailable: {type(exc).__name__}: {exc}"
    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        return None, "this torch has no Flight Recorder dump"
    try:
        fr = load_fr_pickle(dump(includeStackTraces=False))
    except Exception as exc:  # a dump must never take the rank down
        return None, f"{type(exc).__name__}: {exc}"
    if fr is None:
        return None, "the Flight Recorder dump could not be read"
    fr["entries"] = recent(fr.get("entries") or [])
    return fr, ""


def recent(entries: list[dict[str, Any]], keep: int = KEEP_PER_GROUP) -> list[dict[str, Any]]:
    """Every collective still in flight and the newest ``keep`` of each process group (what
    the report reads: a full ring of 2000 entries is about 1 MB of JSON)."""
    seen: dict[Any, int] = {}
    out = []
    for e in reversed(entries):
        group = tuple(e.get("process_group") or ())
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
    (veri_tui/jobfolder/stackdump.py). The file is written only after the handler is in place: the
    supervisor sends the signal only to a rank whose file names its main thread (the signal's
    default would end it)."""
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
