"""The job supervisor: ``python -m veri_tui.jobfolder.supervise --job <job_dir>/job.json``.

What a launcher (or `veri-tui resume`) starts, detached (setsid, stdin /dev/null), locally or over
SSH. Each run of torchrun is an attempt (veri_tui/jobfolder/contract/attempts.py): before it, the
previous attempt's files are archived, partial writes removed, and the newest verified checkpoint
(veri_tui/jobfolder/contract/ckptindex.py) chosen and passed to the trainer as the spec's
``resume_from``. It runs torchrun as a child, keeps ``status`` in job.json true (running, then
succeeded, failed or cancelled), writes ``exit_code`` and, after a failure, the report built by
veri_tui.jobfolder.failures.failures. After a platform failure (RANK_LOST, COMM_ERROR,
HARDWARE_ERROR, RANK_HUNG) it starts the next attempt itself while the job's ``max_restarts``
allows; never in an SSH multi-node job, whose launcher resumes every node together and names the
step (job.json ``resume_choice``). SIGTERM or SIGINT means cancel: torchrun and every worker are
ended (workers run in their own sessions, so signalling torchrun's group would miss them), SIGKILL
after a grace period; with `peer_failed.json` there (a multi-node job's watcher: another node
failed) a failure instead. How an attempt's ranks start, and what a signal means, is its launcher's
(launcher.py): torchrun here, or inside a Slurm allocation (spec `slurm`, $SLURM_JOB_ID) srun
starting one torchrun per node, where SIGTERM/SIGUSR1 may mean a preemption or the time limit
instead (slurmjob.py, srun_tasks.py, docs/slurm.md).

Stdlib only: it must start fast and run on a GPU machine whose image has only the trainer's
dependencies (no torch import here, no pydantic, paramiko or textual). The job folder's
record, statuses and writer are veri_tui/jobfolder/jobdir.py; its processes,
veri_tui/jobfolder/contract/procs.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.canary.canary import CanaryWatch
from veri_tui.jobfolder.contract import attempts, ckptindex
from veri_tui.jobfolder.contract.atomic import modify_job, write_text_atomic
from veri_tui.jobfolder.contract.layout import ELASTIC, EXIT_CODE, JobLayout
from veri_tui.jobfolder.contract.procs import end_processes, job_processes, write_pid
from veri_tui.jobfolder.contract.record import (
    JobError,
    JobRecord,
    job_error,
    plan_line_of,
    read_job,
)
from veri_tui.jobfolder.contract.status import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    FailureCode,
)
from veri_tui.jobfolder.contract.stopping import read_peer_failed
from veri_tui.jobfolder.failures import failures, ncclabort
from veri_tui.jobfolder.failures.hostmem import MemoryWatch
from veri_tui.jobfolder.supervise import nextattempt
from veri_tui.jobfolder.supervise.jobstats import record_measured
from veri_tui.jobfolder.supervise.launcher import CANCEL, Launcher, TorchrunLauncher
from veri_tui.jobfolder.supervise.slurmjob import SrunLauncher, slurm_task
from veri_tui.jobfolder.supervise.watchdog import HangWatch, end_job


def launcher_for(spec: Mapping[str, Any]) -> Launcher:
    """srun inside a Slurm allocation for a Slurm job's spec (`slurm`, $SLURM_JOB_ID set),
    else torchrun."""
    if spec.get("slurm") and os.environ.get("SLURM_JOB_ID"):
        return SrunLauncher()
    return TorchrunLauncher()


class Supervisor:
    """Runs one job's attempts with its launcher and records how each ended."""

    def __init__(self, job_path: Path, launcher: Launcher) -> None:
        self.job_path = job_path.resolve()
        self.job_dir = self.job_path.parent
        self.layout = JobLayout(self.job_dir)
        self.launcher = launcher
        self.cancel_requested = False
        self.signals: list[int] = []  # the launcher's to read, in the wait loop

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum != signal.SIGINT and signum in self.launcher.read_signals:
            self.signals.append(signum)  # what it means may take a scheduler to tell
            self.launcher.heard(signum, self.layout.log)
        else:
            self.cancel_requested = True

    def command(self, spec: Mapping[str, Any]) -> list[str]:
        """The attempt's command line: its launcher's."""
        return self.launcher.command(spec, self.job_path, self.job_dir / ELASTIC)

    def run(self) -> int:
        """Supervise the job to its end, attempt after attempt; returns the last torchrun's
        exit code (0 on success)."""
        for sig in {signal.SIGTERM, signal.SIGINT, *self.launcher.read_signals}:
            signal.signal(sig, self._on_signal)
        write_pid(self.layout.supervisor_pid)
        restarts = self.launcher.begin(self.job_path)
        if restarts is None:  # a Slurm job whose requeues are spent, or that ended meanwhile
            return 1 if read_job(self.job_path).get("status") == FAILED else 0
        while True:
            record = self.begin_attempt()
            if record is None:
                return 0  # started twice, or cancelled before it ran: that outcome stands
            code, status, error = self.run_attempt(record["spec"])
            if status == PENDING and error is not None:  # preempted: its scheduler restarts it
                failed = self.launcher.requeued(self.job_path, code, error)
                return 0 if failed is None else self.finish(code, FAILED, failed)
            alone = not self.launcher.sees_every_node
            limit = attempts.max_restarts(record["spec"], alone=alone)
            if status == FAILED and attempts.retryable(error) and restarts < limit:
                if not self.cancel_requested:
                    restarts += 1
                    self.end_attempt(code, status, error, retry=f"{restarts} of {limit}")
                    end_processes(self.job_path)  # nothing of this attempt may linger
                    continue
            code = self.finish(code, status, error)
            ended = self.launcher.cancelled() if status == CANCELLED else None
            return code if ended is None else ended

    def begin_attempt(self) -> JobRecord | None:
        """Prepare and record the next attempt (veri_tui/jobfolder/supervise/nextattempt.py); None
        when the job already has an outcome."""
        return nextattempt.begin_attempt(self.job_path)

    def run_attempt(self, spec: Mapping[str, Any]) -> tuple[int, str, JobError | None]:
        """Run torchrun once to its end: (exit code, status, error)."""
        watch = HangWatch(
            self.job_dir, spec
        )  # veri_tui/jobfolder/supervise/watchdog.py: ends a job that hangs
        if self.launcher.sees_every_node:  # one folder for every node: it sees all ranks
            watch.ranks = list(range(watch.world))
        canary = CanaryWatch(self.job_path, spec, watch.ranks)  # the gate of `--canary`
        with open(self.layout.torchrun_log, "ab") as log:
            child = subprocess.Popen(
                self.command(spec),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.job_dir,
                env=watch.environment(self.launcher.environment()),
            )
        write_pid(self.layout.torchrun_pid, child.pid)
        memory = MemoryWatch.for_this_process()  # explains a rank's SIGKILL by the OOM killer
        hung = None
        while child.poll() is None and not self.cancel_requested and hung is None:
            memory.poll()
            hung = watch.poll()  # no rank advanced for hang_timeout_s: RANK_HUNG
            canary.poll()
            self.read_signal()
            time.sleep(0.2)
        while self.signals and not self.cancel_requested:  # srun can end before they are read
            self.read_signal()
        if hung is not None:
            return end_job(self.job_path, child, hung, spec), FAILED, hung
        world = int(spec.get("gpu_count") or 1)
        if self.cancel_requested:
            peer = read_peer_failed(self.job_dir)  # the job's watcher: another node failed
            ran = child.poll() is None
            end_processes(self.job_path, child=child)
            if peer is None:
                return self.cancelled(child.wait())
            self.cancel_requested = False  # not a cancel; torchrun's own end, if any, is read
            if ran:
                said = failures.peer_error(peer, int(spec.get("node_rank") or 0), world)
                failures.append_report(self.layout.log, said, "")
                return child.wait(), FAILED, said
        code = child.returncode
        stopped = self.launcher.stopped(code, world, self.job_dir, self.layout.log)
        if stopped == CANCEL:
            self.cancel_requested = True
            return self.cancelled(code)
        if isinstance(stopped, tuple):
            return code, *stopped
        if code == 0:
            # A no-go canary's ranks end at its gate, without an artifact: stopped, not done.
            return code, CANCELLED if canary.stopped() else SUCCEEDED, None
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
            error = job_error(FailureCode.RANK_LOST, msg, world)
        nproc = int(spec.get("nproc_per_node") or world)
        found = failures.analyze(
            self.job_dir,
            world,
            nproc,
            code,
            memory,
            node=int(spec.get("node_rank") or 0),
            logs=self.launcher.node_logs(self.job_dir),
        )
        if error is None or found.get("rank") is not None:
            error = found
        error = ncclabort.with_dumps(self.job_dir, error, watch.ranks)  # NCCL's own dumps
        failures.append_report(self.layout.log, error, plan_line_of(spec))
        return code, FAILED, error

    def read_signal(self) -> None:
        """The first signal waiting for the launcher, read (a cancel, or a stop asked)."""
        if self.signals and self.launcher.on_signal(self.signals.pop(0), self.job_dir,
                                                    self.layout.log):  # fmt: skip
            self.cancel_requested = True

    def fail_self(self, exc: Exception) -> None:
        """Record the supervisor's own crash as the job's failure, ending what it started."""
        error = job_error(
            FailureCode.UNKNOWN, f"supervisor error: {type(exc).__name__}: {exc}", None
        )
        try:
            end_processes(self.job_path)
            self.finish(1, FAILED, error)
        except (OSError, ValueError):
            pass  # job.json itself is unusable: the launcher reports the job lost

    def cancelled(self, code: int) -> tuple[int, str, None]:
        # Said in the log too, so whoever follows it sees why it stopped. A cancel leaves no
        # partial checkpoint or artifact folder behind.
        attempts.remove_stale(ckptindex.stale_writes(self.job_dir, self._output_dir()))
        failures.append_lines(self.layout.log, ["job cancelled: every rank ended"])
        return code, CANCELLED, None

    def _output_dir(self) -> str | None:
        try:
            return read_job(self.job_path)["spec"].get("output_dir")
        except (OSError, ValueError, KeyError):
            return None

    def end_attempt(self, code: int, status: str, error: JobError | None, retry: str) -> None:
        """Close a platform-failed attempt that will be retried: the job stays `running`."""

        def close(record: JobRecord) -> None:
            attempts.close_attempt(record, status, error, code)
            record.update({"status": RUNNING, "ended_at": None})

        modify_job(self.job_path, close)
        code_text = (error or {}).get("code", FailureCode.UNKNOWN)
        failures.append_lines(
            self.layout.log,
            [f"retry: {code_text} (platform) ended the attempt; restart {retry} (max_restarts)"],
        )

    def finish(self, code: int, status: str, error: JobError | None) -> int:
        record_measured(self.job_path)  # before the outcome: a reader of it sees both
        write_text_atomic(self.job_dir / EXIT_CODE, f"{code}\n")
        modify_job(self.job_path, lambda rec: attempts.close_attempt(rec, status, error, code))
        return code


def _spec(job_path: Path) -> Mapping[str, Any]:
    """The job's spec, for its launcher (an unreadable record: torchrun's, and the supervisor
    records the record's own failure)."""
    try:
        return read_job(job_path).get("spec") or {}
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    """Entry point: supervise the job whose job.json is given."""
    parser = argparse.ArgumentParser(
        prog="python -m veri_tui.jobfolder.supervise", description=__doc__
    )
    parser.add_argument("--job", required=True, help="path of the job's job.json")
    parser.add_argument("--slurm-task", metavar="HOST:PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.slurm_task:  # a Slurm job's srun task: becomes its node's torchrun
        slurm_task(Path(args.job).resolve(), args.slurm_task)
    job = Path(args.job)
    supervisor = Supervisor(job, launcher_for(_spec(job)))
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
