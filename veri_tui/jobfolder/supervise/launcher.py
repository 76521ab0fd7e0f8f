"""How the supervisor (supervise.py) starts an attempt's ranks, and what a signal to it means:
its launcher strategy.

- `TorchrunLauncher`: torchrun on this machine, one node of the job (torchrun_cmd.py); a
  SIGTERM or SIGINT to the supervisor is a cancel.
- `SrunLauncher` (slurmjob.py): inside a Slurm allocation, srun starting one torchrun per
  node, every node's ranks writing to this one folder; SIGTERM and SIGUSR1 are read in the
  wait loop, since what they mean (a cancel, a preemption, the time limit) takes the
  controller to tell, and a preempted attempt is requeued.

supervise.py's `launcher_for` picks one from the job's spec and the environment. Stdlib only,
like the supervisor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from veri_tui.jobfolder.contract.record import JobError
from veri_tui.jobfolder.supervise.torchrun_cmd import rank_environment, torchrun_command

#: What `Launcher.stopped` answers for a stop that was a cancel after all.
CANCEL = "cancel"


class Launcher(Protocol):
    """What the supervisor asks of its launcher, attempt after attempt."""

    #: The signals read in the supervisor's wait loop (`on_signal`); any other is a cancel.
    read_signals: tuple[int, ...]
    #: Whether this supervisor sees every node's ranks (one folder for all of them): the
    #: watchdog watches every rank, and the supervisor restarts a multi-node job itself.
    sees_every_node: bool

    def begin(self, job_path: Path) -> int | None:
        """The restarts already made (0 for a fresh start); None when the job must not run
        (recorded so)."""

    def command(self, spec: Mapping[str, Any], job_path: Path, log_dir: Path) -> list[str]:
        """The attempt's command line (its elastic error files under ``log_dir``)."""

    def environment(self) -> dict[str, str]:
        """The ranks' environment."""

    def node_logs(self, job_dir: Path) -> list[tuple[int, Path, Path]] | None:
        """(node, torchrun log dir, torchrun output) of every node, when they are not this
        folder's own: the failure report's sources."""

    def heard(self, signum: int, log: Path) -> None:
        """A signal to be read in the wait loop has arrived (said at once in the log)."""

    def on_signal(self, signum: int, job_dir: Path, log: Path) -> bool:
        """Read a signal of `read_signals`; True when it is a cancel."""

    def stopped(self, code: int, world: int, job_dir: Path, log: Path
                ) -> tuple[str, JobError | None] | str | None:  # fmt: skip
        """The attempt's (status, error) when its ranks ended on a stop request; CANCEL for
        a stop that was a cancel; None for an attempt that was not stopped."""

    def requeued(self, job_path: Path, code: int, error: JobError) -> JobError | None:
        """A preempted attempt recorded and the job requeued; the job's failure when it
        cannot be."""

    def cancelled(self) -> int | None:
        """After a cancel is recorded: the supervisor's exit status, when its scheduler must
        see the cancel too (None: the attempt's own)."""


class TorchrunLauncher:
    """torchrun on this machine (one node of the job); a SIGTERM is a cancel."""

    read_signals: tuple[int, ...] = ()
    sees_every_node = False

    def begin(self, job_path: Path) -> int | None:
        return 0

    def command(self, spec: Mapping[str, Any], job_path: Path, log_dir: Path) -> list[str]:
        return torchrun_command(spec, job_path, log_dir)

    def environment(self) -> dict[str, str]:
        return rank_environment(os.environ)

    def node_logs(self, job_dir: Path) -> list[tuple[int, Path, Path]] | None:
        return None

    def heard(self, signum: int, log: Path) -> None:
        return None

    def on_signal(self, signum: int, job_dir: Path, log: Path) -> bool:
        return True

    def stopped(self, code: int, world: int, job_dir: Path, log: Path
                ) -> tuple[str, JobError | None] | str | None:  # fmt: skip
        return None

    def requeued(self, job_path: Path, code: int, error: JobError) -> JobError | None:
        return error  # nothing requeues it: the preemption is its failure

    def cancelled(self) -> int | None:
        return None
