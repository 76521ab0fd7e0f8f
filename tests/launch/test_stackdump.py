"""A stopped rank's stack, read from its process (veri_tui/jobfolder/failures/stackdump.py), without
torchrun.

A real Python process registers the rank's handler (veri_tui/trainer/forensics.py's
`register_stack_dump`) and spins in a function of its own; it is SIGSTOPped, the supervisor's
`collect` finds it silent, reads its stack, and leaves it stopped as it was. A stopped process
that never registered the handler is not signalled (the signal's default would end it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launch_helpers import wait_for

from veri_tui.jobfolder.contract.procs import rank_pid_path, write_pid
from veri_tui.jobfolder.failures.forensics import Answers, collect
from veri_tui.jobfolder.failures.hangreport import explain
from veri_tui.jobfolder.failures.stackdump import parse, stack_path

SPINNER = """\
import sys, threading, time
from veri_tui.trainer.forensics import register_stack_dump

def waiting_thread():
    while True:
        time.sleep(0.25)

def hold_the_rank():
    # "ready" from inside: once the test reads it, this frame is on the stack (printed before
    # the call, a SIGSTOP under load could land at the module's call line).
    print("ready", flush=True)
    n = 0
    while True:
        n += 1

threading.Thread(target=waiting_thread, daemon=True).start()
register_stack_dump(sys.argv[1], 1)
hold_the_rank()
"""

_LINES = SPINNER.splitlines()
SPINNER_BODY = (  # 1-based lines of hold_the_rank's print and its `n += 1`
    next(i for i, t in enumerate(_LINES, 1) if "print(" in t),
    next(i for i, t in enumerate(_LINES, 1) if "n += 1" in t),
)

FAULTHANDLER = """\
Current thread 0x00007f09b06df6c0 (most recent call first):
  File "/x/threading.py", line 982 in run

Thread 0x00007f09b1443b80 (most recent call first):
  File "/repo/trainer/loop.py", line 219 in step
  File "/repo/trainer/__main__.py", line 62 in main
"""


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]


def test_faulthandlers_output_gives_the_main_threads_frames_outermost_first() -> None:
    assert parse(FAULTHANDLER, "0x00007f09b1443b80") == [
        ["/repo/trainer/__main__.py", 62, "main"],
        ["/repo/trainer/loop.py", 219, "step"],
    ]
    assert parse(FAULTHANDLER, "0x0000000000000001") == []


def test_a_stopped_rank_is_placed_at_its_stack_and_stays_stopped(tmp_path: Path) -> None:
    script = tmp_path / "spinner.py"
    script.write_text(SPINNER)
    (tmp_path / "pids").mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    other = subprocess.Popen(["sleep", "60"])  # stopped, but no handler: never signalled
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        write_pid(rank_pid_path(tmp_path, 1), proc.pid)
        write_pid(rank_pid_path(tmp_path, 2), other.pid)
        for p in (proc, other):
            os.kill(p.pid, signal.SIGSTOP)
            wait_for(lambda p=p: state(p.pid) == "T", 5, "stopped")
        t0 = time.monotonic()
        got = collect(tmp_path, [1, 2], wait_s=1)
        print(f"stopped rank's stack read in {time.monotonic() - t0:.2f} s")
        wait_for(lambda: state(proc.pid) == "T", 2, "stopped again, as it was")
        assert state(other.pid) == "T"
        assert other.poll() is None and 2 not in got.stacks
        assert got.stacks[1][-1][2] == "hold_the_rank", got.stacks[1]
        # Any line of hold_the_rank from its print on: where SIGSTOP landed.
        line = got.stacks[1][-1][1]
        assert line in range(SPINNER_BODY[0], SPINNER_BODY[1] + 1), got.stacks[1]
        assert got.stacks[1][-1][0] == str(script)
        assert "stopped (SIGSTOP" in got.silent[1]
        assert "Thread 0x" in stack_path(tmp_path, 1).read_text()
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()
    # In the report: the missing rank placed at its own frame, with how the stack was read.
    entry = {
        "collective_seq_id": 5,
        "profiling_name": "gloo:all_reduce",
        "process_group": ["0", "default_pg"],
        "retired": False,
        "input_sizes": [[2]],
        "input_dtypes": ["Double"],
    }
    dump = {"rank": 0, "stack": [], "flight_recorder": {"entries": [entry]}}
    found = explain(Answers({0: dump}, got.silent, got.stacks), [0, 1])
    assert found.blamed == [1]
    assert found.headline == (
        "rank 1 is missing from all_reduce #5 of the default group, which rank 0 entered; "
        f"rank 1 at {script}:{line} in hold_the_rank ({got.silent[1]}: its stack read from the "
        "process)"
    )
    assert "    its stack, read from the stopped process:" in found.lines
