"""Where the suite's CPU goes: every process's CPU time, sampled while a command runs.

    python benchmarks/suite_cpu.py [--every S] [--by-test N] -- \
        python -m pytest -q -n 3 --dist loadgroup

Runs the command and, twice a second (``--every``), reads each process's user + system time
from ``/proc/PID/stat`` (keyed by pid and start time, so a reused pid is a new process);
at the end prints the machine's busy share (``/proc/stat``) and the CPU-minutes of each kind
of process: the trainer's ranks and torchrun, the pytest workers, supervisors, data checks,
the SSH preflight, the kernel's threads and the rest. Why sampled: detached jobs and sshd's
children are nobody's waited-for children, so ``time`` on pytest misses them. A process's
last half second is lost, so the figures are a little low (docs/ci.md quotes them).
`--by-test N` then prints the N tests whose processes used the most CPU: a process is a
test's when `PYTEST_CURRENT_TEST` is in its environment (pytest sets it in the worker, and a
launch's supervisor, torchrun and ranks inherit it); processes sshd or slurmd started are
not (their environment is the daemon's), nor the workers themselves (/proc shows the
environment a process started with).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HZ = os.sysconf("SC_CLK_TCK")
KINDS = (  # first match wins: (text in the command line, kind)
    ("veri_tui.trainer.datacheck", "data checks"),
    ("torch.distributed.run", "torchrun"),
    ("veri_tui.trainer", "trainer ranks"),
    ("trainer_jobs.py", "trainer ranks"),
    ("exec(eval(sys.stdin.readline()))", "pytest workers (xdist)"),
    ("veri_tui.jobfolder.supervise", "supervisors"),
    ("import importlib.util, json", "SSH preflight (imports torch on the host)"),
    ("sshd", "sshd"),
    ("slurm", "Slurm daemons"),
    ("chrom", "chromium"),
    ("veri_tui", "veri-tui commands"),
)


def busy() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine so far."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def kind(cmdline: str, name: str) -> str:
    """The row a process is counted in: by its command line, else its name (kernel threads
    have no command line)."""
    for text, label in KINDS:
        if text in cmdline:
            return label
    return "kernel threads: " + name if not cmdline else "other: " + name


def started_for(pid: str) -> str:
    """The test a process was started for (`PYTEST_CURRENT_TEST`, its id), else ""."""
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"PYTEST_CURRENT_TEST="):
                return item.split(b"=", 1)[1].decode(errors="replace").rsplit(" (", 1)[0]
    except OSError:
        pass
    return ""


def sample(seen: dict[str, list[Any]]) -> None:
    """Update seen[pid:start] = [cpu seconds, kind, test] for every process now."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            head, rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
            fields = rest.split()
            key = f"{pid}:{fields[19]}"
            cpu = (int(fields[11]) + int(fields[12])) / HZ
            if key in seen:
                seen[key][0] = cpu
                continue
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            seen[key] = [cpu, kind(raw.replace(b"\0", b" ").decode(errors="replace"),
                                   head.split("(", 1)[1]), started_for(pid)]  # fmt: skip
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue


def main() -> int:
    """Run the command, sample until it ends, print the table; the command's exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--by-test", type=int, default=0, metavar="N",
                        help="then the N tests whose processes used the most CPU")  # fmt: skip
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    seen: dict[str, list[Any]] = {}
    sample(seen)  # processes already running count only what they use from here on
    base = {key: row[0] for key, row in seen.items()}
    before, start = busy(), time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(seen)
        time.sleep(args.every)
    after, wall = busy(), time.monotonic() - start
    used = (after[0] - before[0]) / HZ
    share = (after[0] - before[0]) / max(1, after[1] - before[1])
    print(f"{wall / 60:.1f} min wall, machine {share:.1%} busy: {used / 60:.1f} CPU-minutes")
    rows: Counter[str] = Counter()
    count: Counter[str] = Counter()
    tests: Counter[str] = Counter()
    for key, (cpu, label, test) in seen.items():
        rows[label] += cpu - base.get(key, 0.0)
        count[label] += 1
        if test:
            tests[test] += cpu - base.get(key, 0.0)
    for label, cpu in rows.most_common(15):
        print(f"{cpu / 60:7.2f} CPU-min  {count[label]:5d} processes  {label}")
    for test, cpu in tests.most_common(args.by_test):
        print(f"{cpu:8.1f} CPU-s  {test}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
