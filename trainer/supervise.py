"""The job supervisor: ``python -m trainer.supervise --job <job_dir>/job.json``.

What a launcher starts, detached (setsid, stdin /dev/null), locally or over SSH. It runs
torchrun as a child, keeps ``status`` in job.json true (running, then succeeded, failed or
cancelled), writes ``exit_code`` and, after a failure, the report built by trainer.failures.
SIGTERM or SIGINT means cancel: torchrun and every worker are ended (workers run in their own
sessions, so signalling torchrun's group would miss them), SIGKILL after a grace period.

Stdlib only: it must start fast and run on a GPU machine whose image has only the trainer's
dependencies (no torch import here, no pydantic, paramiko or textual).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer import failures

TERMINAL = ("succeeded", "failed", "cancelled")
GRACE_S = 5.0  # SIGTERM -> SIGKILL; cancel must end every rank within 10 s


def now_iso() -> str:
    """UTC time as ISO-8601 with seconds, the form job.json uses."""
    # timezone.utc, not datetime.UTC: the GPU machine's Python may be older than 3.11.
    return datetime.now(timezone.utc).isoformat(timespec="seconds")  # noqa: UP017


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write aside and rename into place, so readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str) -> None:
    """A small text file (pid, exit code) written aside and renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def update_job(path: Path, **fields: Any) -> dict[str, Any]:
    """Read job.json, set top-level fields, replace it atomically; returns the new record."""
    record = json.loads(path.read_text(encoding="utf-8"))
    record.update(fields)
    write_json_atomic(path, record)
    return record


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
    job_path = job_path.resolve()
    job_dir, wanted = job_path.parent, str(job_path)
    skip = {os.getpid(), *exclude}
    sup = read_pid(job_dir / "supervisor.pid")
    if sup:
        skip.add(sup)
    found: set[int] = set()
    candidates = [read_pid(p) for p in (job_dir / "pids").glob("rank-*")]
    candidates.append(read_pid(job_dir / "torchrun.pid"))
    if Path("/proc/self").exists():
        candidates += [int(d) for d in os.listdir("/proc") if d.isdigit()]
    for pid in candidates:
        if not pid or pid in skip or pid in found:
            continue
        args = _cmdline(pid)
        if wanted in args and "trainer.supervise" not in args and pid_alive(pid):
            found.add(pid)
    return sorted(found)


def read_pid(path: Path) -> int | None:
    """The integer in a pid file, or None when missing or unreadable."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def end_processes(job_path: Path, grace: float = GRACE_S, child: Any = None) -> list[int]:
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


class Supervisor:
    """Runs one job's torchrun and records how it ended."""

    def __init__(self, job_path: Path) -> None:
        self.job_path = job_path.resolve()
        self.job_dir = self.job_path.parent
        self.cancel_requested = False

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.cancel_requested = True

    def command(self, spec: dict[str, Any]) -> list[str]:
        """The torchrun command line; ``--standalone`` picks a free rendezvous port per job."""
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(int(spec.get("nproc_per_node") or spec["gpu_count"])),
            "--log-dir", str(self.job_dir / "elastic"),
            "-m", "trainer", "--job", str(self.job_path),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # One thread per CPU rank: N ranks each using every core would thrash; torchrun only
        # sets this (with a warning) when unset. On GPUs ranks do little CPU work either way.
        env.setdefault("OMP_NUM_THREADS", "1")
        return env

    def run(self) -> int:
        """Supervise the job to its end; returns torchrun's exit code (0 on success)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        write_text_atomic(self.job_dir / "supervisor.pid", f"{os.getpid()}\n")
        record = json.loads(self.job_path.read_text(encoding="utf-8"))
        if record.get("status") in TERMINAL:
            return 0  # started twice: the first run already decided
        spec = record["spec"]
        update_job(self.job_path, status="running", started_at=now_iso())
        with open(self.job_dir / "torchrun.log", "ab") as log:
            child = subprocess.Popen(
                self.command(spec),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.job_dir,
                env=self.environment(),
            )
        write_text_atomic(self.job_dir / "torchrun.pid", f"{child.pid}\n")
        while child.poll() is None and not self.cancel_requested:
            time.sleep(0.2)
        if self.cancel_requested:
            end_processes(self.job_path, child=child)
            return self.cancelled(child.wait())
        code = child.returncode
        if code == 0:
            return self.finish(code, "succeeded", None)
        error = None
        if code < 0:
            # torchrun itself was killed: its ranks run on in their own sessions. They are the
            # job, so wait for them (a cancel still ends them), then report the lost agent.
            while job_processes(self.job_path) and not self.cancel_requested:
                time.sleep(0.5)  # each check scans /proc: keep it cheap on a busy node
            if self.cancel_requested:
                end_processes(self.job_path)
                return self.cancelled(code)
            msg = f"torchrun was killed by signal {-code}; its ranks were left without their agent"
            error = failures.job_error("RANK_LOST", msg, int(spec.get("gpu_count") or 1))
        world = int(spec.get("gpu_count") or 1)
        nproc = int(spec.get("nproc_per_node") or world)
        found = failures.analyze(self.job_dir, world, nproc, code)
        if error is None or found.get("rank") is not None:
            error = found
        plan_line = next((ln for ln in spec.get("plan_header", []) if ln.startswith("plan:")), "")
        failures.append_report(self.job_dir / "log.txt", error, plan_line)
        return self.finish(code, "failed", error)

    def fail_self(self, exc: Exception) -> None:
        """Record the supervisor's own crash as the job's failure, ending what it started."""
        error = failures.job_error(
            "UNKNOWN", f"supervisor error: {type(exc).__name__}: {exc}", None
        )
        try:
            end_processes(self.job_path)
            self.finish(1, "failed", error)
        except (OSError, ValueError):
            pass  # job.json itself is unusable: the launcher reports the job lost

    def cancelled(self, code: int) -> int:
        # Said in the log too, so whoever follows it sees why it stopped.
        failures.append_lines(self.job_dir / "log.txt", ["job cancelled: every rank ended"])
        return self.finish(code, "cancelled", None)

    def finish(self, code: int, status: str, error: dict[str, Any] | None) -> int:
        write_text_atomic(self.job_dir / "exit_code", f"{code}\n")
        update_job(self.job_path, status=status, ended_at=now_iso(), exit_code=code, error=error)
        return code


def main(argv: list[str] | None = None) -> int:
    """Entry point: supervise the job whose job.json is given."""
    parser = argparse.ArgumentParser(prog="python -m trainer.supervise", description=__doc__)
    parser.add_argument("--job", required=True, help="path of the job's job.json")
    args = parser.parse_args(argv)
    supervisor = Supervisor(Path(args.job))
    try:
        code = supervisor.run()
    except Exception as exc:
        # A broken record or folder must still end as a failed job, not as one that looks
        # like it is running until it is declared lost.
        supervisor.fail_self(exc)
        raise
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
