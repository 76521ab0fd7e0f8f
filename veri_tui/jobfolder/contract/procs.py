"""A job's processes: its pid files, finding its live processes, ending them.

The job folder holds `supervisor.pid`, `torchrun.pid` and `pids/rank-<r>` (one per worker);
a reader judges a `pending`/`running` job lost by the supervisor's, and cancel ends torchrun
and every worker by the others, with /proc as the backstop (veri_tui/jobfolder/jobdir.py owns the
rest of the folder). Used by the supervisor, by cancel (locally, and on a host through the
uploaded jobfolder package) and by tests.

Stdlib only, like the whole jobfolder package.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from veri_tui.jobfolder.contract.atomic import write_text_atomic
from veri_tui.jobfolder.contract.layout import PIDS, SUPERVISOR_PID, TORCHRUN_PID, JobLayout

#: Modules on a command line that names the job but is not one of its processes: the
#: supervisor and `python -m veri_tui.jobfolder status|cancel|resume` (a cancel must not end
#: itself), each also as releases before this one named it (a job they started may still run:
#: `jobfolder.*` before the packages moved into veri_tui, `trainer.supervise` before that).
NOT_THE_JOB = {
    "veri_tui.jobfolder.supervise", "veri_tui.jobfolder",
    "jobfolder", "trainer.supervise",
}  # fmt: skip
GRACE_S = 5.0  # SIGTERM -> SIGKILL; cancel must end every rank within 10 s


def rank_pid_path(job_dir: Path, rank: int) -> Path:
    """`pids/rank-<r>`: the worker's pid, so cancel can end workers torchrun lost."""
    return JobLayout(Path(job_dir)).rank_pid(rank)


def write_pid(path: Path, pid: int | None = None) -> None:
    """Write ``pid`` (default: this process) to a pid file, atomically."""
    write_text_atomic(path, f"{os.getpid() if pid is None else pid}\n")


def read_pid(path: Path) -> int | None:
    """The integer in a pid file, or None when missing or unreadable."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return not Path("/proc/self").exists()  # no procfs: trust kill(0)
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode("utf-8", "replace").split("\0")


def job_processes(job_path: Path, exclude: tuple[int, ...] = ()) -> list[int]:
    """Live pids of this job's torchrun and ranks (never the supervisor or the caller).

    The pid files are the primary source; every process whose command line carries this
    job.json path is found too, which covers a worker killed before it wrote its pid file and
    a pid file whose process has gone and whose pid was reused (its command line differs).
    """
    job_path = Path(job_path).resolve()
    job_dir, wanted = job_path.parent, str(job_path)
    skip = {os.getpid(), *exclude}
    sup = read_pid(job_dir / SUPERVISOR_PID)
    if sup:
        skip.add(sup)
    found: set[int] = set()
    candidates = [read_pid(p) for p in (job_dir / PIDS).glob("rank-*")]
    candidates.append(read_pid(job_dir / TORCHRUN_PID))
    if Path("/proc/self").exists():
        candidates += [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for pid in candidates:
        if not pid or pid in skip or pid in found:
            continue
        args = _cmdline(pid)
        if wanted in args and not NOT_THE_JOB & set(args) and pid_alive(pid):
            found.add(pid)
    return sorted(found)


def end_processes(
    job_path: Path, grace: float = GRACE_S, child: subprocess.Popen[bytes] | None = None
) -> list[int]:
    """SIGTERM the job's torchrun and ranks, SIGKILL what is left after ``grace`` seconds.

    ``child`` is the torchrun Popen when the caller is its parent (so it gets reaped).
    Returns the pids that had to be SIGKILLed.
    """
    exclude = (child.pid,) if child is not None else ()
    targets = job_processes(job_path, exclude)
    if child is not None and child.poll() is None:
        targets.append(child.pid)
    for pid in targets:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()
        if not any(pid_alive(p) for p in targets) and not job_processes(job_path, exclude):
            return []
        time.sleep(0.1)
    killed = [p for p in set(targets) | set(job_processes(job_path, exclude)) if pid_alive(p)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    if child is not None:
        child.wait()
    return killed


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
