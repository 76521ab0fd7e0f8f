"""A Slurm login node as a `Host` (veri_tui/launch/host.py): a job's supervisor is a batch job.

`SlurmHost` owns the login node's own host (`LocalHost` for `--slurm local`, `SshHost` for
an alias or user@host[:port]) and keeps its commands, files, staging and paths, each named
in login.py (`LoginNode`): the job folder sits on the filesystem the login node and the
compute nodes share. The `slurm` backend (veri_tui/launch/backends/slurm.py) opens it. What
differs:

- `probe`: the partition's facts (partition.py) decide the layout (nodes x ranks per node)
  and GPU; job folders go under `<veri home>/slurm/jobs` (a Slurm job is listed by its
  registry entry, not by folder as this machine's own jobs are);
- `start_supervisor`: writes `<job_dir>/sbatch.sh` (script.py) and runs `sbatch --parsable`;
  the handle is the Slurm job id, also in job.json (`slurm_job_id`, a string as the
  supervisor writes it). Anything that fails after sbatch answered scancels the job;
- `alive`, `judge`: the controller's state (states.py) instead of a pid;
- `cancel_job`: the `cancel.request` marker, `scancel --signal=TERM --full`, `scancel` after
  the grace, then `cancelled` recorded if nothing did;
- `follow`: the log polled by offset (the supervisor's pid is a compute node's).
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jobfolder
from jobfolder.layout import CANCEL_REQUEST, JOB_FILE
from jobfolder.lost import closed, lost_record
from jobfolder.lost import judge as judge_pid
from jobfolder.record import JobRecord
from jobfolder.status import CANCELLED, PENDING, has_ended
from veri_tui.errors import VeriError
from veri_tui.launch.host import (
    Host,
    HostFacts,
    jobfolder_argv,
    supervisor_argv,
    tracker_problems,
)
from veri_tui.launch.machine import Result
from veri_tui.launch.records import LogLine, follow_lines
from veri_tui.launch.slurm.login import LoginNode
from veri_tui.launch.slurm.options import SlurmOptions
from veri_tui.launch.slurm.partition import Partition, layout, on_partition, read_partition
from veri_tui.launch.slurm.script import SCRIPT, batch_script
from veri_tui.launch.slurm.states import SlurmState, outcome, query

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord

#: The source folder holding the jobfolder and trainer packages (`--slurm local`: the batch
#: job imports them from here, whatever PYTHONPATH sbatch's environment carries).
SOURCE_ROOT = str(Path(jobfolder.__file__).resolve().parents[1])
#: How long a scancel'd job may take to leave the queue (Slurm's KillWait, then cleanup).
LEAVE_S = 60.0


class SlurmHost(LoginNode):
    """A login node, submitting batch jobs. ``options`` None: a host reopened for a job
    already submitted (reading, cancelling or resuming it needs none). Its commands, files
    and paths are the login node's (login.py), every member named there."""

    kind = "slurm"

    def __init__(self, login_host: Host, options: SlurmOptions | None = None) -> None:
        super().__init__(login_host)
        self.options = options
        self.name = login_host.name  # what the registry keeps: `local`, or the SSH host
        self.label: str | None = f"slurm:{login_host.name}"
        self.where = f"the Slurm cluster of {login_host.where}"
        self.partition: Partition | None = None
        self._job_update: dict[str, Any] = {}

    def slurm(self, argv: Sequence[str]) -> Result:
        """A Slurm client command on the login node; VeriError when it is not installed."""
        try:
            return self.login_host.run(list(argv), timeout=60)
        except FileNotFoundError:  # this machine (over SSH the shell says so: exit 127)
            raise VeriError(
                f"{argv[0]} is not installed on {self.login_host.where}; run on "
                "the cluster's login node or pass --slurm LOGIN",
                key="slurm",
            ) from None

    def pythonpath(self, job_dir: str) -> list[str]:
        """This machine's source folder (`local`), else the job's uploaded packages."""
        if self.login_host.local:
            return ["env", f"PYTHONPATH={SOURCE_ROOT}"]
        return self.login_host.pythonpath(job_dir)

    # -- before the launch ----------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """The login node's facts (Python, torch, the model, free space) and the partition's:
        the job's layout, its GPU, a node's memory. A partition the controller does not have
        raises VeriError `partition` here, before anything is uploaded or submitted."""
        if self.options is None:
            raise VeriError("this Slurm host was opened without options", key="slurm")
        self.partition = part = read_partition(self.slurm, self.options.partition, self.where)
        facts = self._login_facts(job, dataset_bytes)
        per_node, gpu, problems = layout(job, part, self.options)
        nodes = self.options.nodes
        facts.problems += problems
        facts.gpus = []  # the login node's GPUs (if any) are not the job's
        facts.veri_home = posixpath.join(facts.veri_home, "slurm")
        facts.facts["mem_available_bytes"] = part.memory_bytes or None
        chosen = {
            **self.options.to_dict(),
            "partition": part.name,
            "gpus_per_node": per_node if part.gpus_per_node else 0,
        }
        facts.spec = {"slurm": chosen, "nnodes": nodes, "nproc_per_node": per_node}
        facts.notes.append(f"slurm: {part.summary()}")
        ranks = f"{per_node} x {gpu}" if part.gpus_per_node else f"{per_node} CPU ranks (gloo)"
        facts.notes.append(f"slurm: {nodes} node(s) x {ranks}")
        self._job_update = {"gpu_count": nodes * per_node, **({"gpu": gpu} if gpu else {})}
        if nodes > 1:  # the allocation's nodes: the plan's network term, its probe's figure
            self._job_update["node_count"] = nodes
        return facts

    def _login_facts(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        if self.login_host.local:
            from jobfolder.layout import veri_home

            home, python = str(Path.home()), self.login_host.python
            found = HostFacts(self.where, python, {}, home, str(veri_home()), shown=False)
            found.problems += tracker_problems(job)  # the compute nodes share this install
            return found
        from veri_tui.launch.ssh.host import SshHost
        from veri_tui.launch.ssh.preflight import run_preflight

        conn = cast(SshHost, self.login_host).conn
        full = not job.hyperparameters.lora_rank
        return run_preflight(conn, model=job.model, gpu_count=0, full_finetune=full,
                             dataset_bytes=dataset_bytes,
                             report_to=job.hyperparameters.report_to)  # fmt: skip

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]:
        """The login node's plan of the job laid out on the partition (``given`` is not used:
        it was made for another layout)."""
        if self.login_host.local:
            from veri_tui.launch.jobdata import with_data

            # Planned with the dataset it trains on, so the predicted price counts its tokens.
            for key in ("dataset", "eval_dataset"):
                self._job_update.setdefault(key, getattr(with_data(job), key))
        laid_out, rec = self.login_host.plan(job.model_copy(update=self._job_update), facts)
        return laid_out, on_partition(rec, self.partition)

    # -- the batch job ----------------------------------------------------------------------

    def batch_script(self, job_dir: str, record: JobRecord) -> str:
        """The job's sbatch.sh (script.py): its spec, the supervisor as this node starts it."""
        spec = cast(dict[str, Any], record["spec"])
        return batch_script(record["job_id"], job_dir, spec, supervisor_argv(self, job_dir))

    def start_supervisor(self, job_dir: str) -> int:
        """Write sbatch.sh, submit it; the Slurm job id (also in job.json). A cancel marker
        left by an earlier cancel goes first: this attempt's SIGTERM is a preemption."""
        record = json.loads(self.login_host.read_bytes(posixpath.join(job_dir, JOB_FILE), 1 << 24))
        script = posixpath.join(job_dir, SCRIPT)
        self.login_host.write_atomic(script, self.batch_script(job_dir, record).encode())
        marker = posixpath.join(job_dir, CANCEL_REQUEST)
        if self.login_host.exists(marker):
            self.login_host.remove(marker)
        res = self.slurm(["sbatch", "--parsable", f"--chdir={job_dir}", script])
        try:
            job_id = int(res.text.strip().split(";")[0])
        except ValueError:
            raise VeriError(
                f"sbatch on {self.login_host.where} refused the job: {res.error_line()}",
                key="slurm",
            ) from None
        try:
            self._jobfolder(job_dir, "set-slurm-id", str(job_id))
        except BaseException:
            self.slurm(["scancel", str(job_id)])  # no half-started job stays queued
            raise
        return job_id

    def _jobfolder(self, job_dir: str, command: str, *args: str) -> None:
        """`python -m jobfolder COMMAND JOB_JSON ARGS` on the login node: job.json changed
        under its lock by the job's own package."""
        job = posixpath.join(job_dir, JOB_FILE)
        res = self.login_host.run(jobfolder_argv(self, job_dir, command, job, *args), timeout=60)
        if res.exit_status != 0:
            raise VeriError(f"job.json on {self.login_host.where}: {res.error_line()}", key="job")

    def alive(self, pid: int) -> bool:
        state = query(self.slurm, pid)
        return state is not None and state.alive

    def judge(
        self, job_dir: str, record: JobRecord, pid: int | None, reread: Callable[[], JobRecord]
    ) -> JobRecord:
        """The record as the controller explains it: queued or running (with the Slurm state
        and reason), else the outcome its end state means, else lost. A read writes
        nothing: the reader's `settle()` records that outcome in job.json (the controller
        forgets an ended job after MinJobAge; without accounting nothing else would
        remember why it ended)."""
        if has_ended(record):
            return record
        if pid is None:  # not submitted yet (or its submission failed): the lost rule's
            return judge_pid(record, None, self.alive, reread, where=self.name)
        state = query(self.slurm, pid)
        if state is not None and state.alive:
            return with_state(record, state)
        again = reread()  # the supervisor may have recorded its end meanwhile
        if has_ended(again):
            return again
        if state is None:
            return lost_record(again, f"its Slurm job {pid} is unknown to the controller")
        world = (again.get("spec") or {}).get("gpu_count")
        mapped = outcome(state, world)
        if mapped is None:
            return with_state(
                lost_record(
                    again, f"its Slurm job {pid} ended {state.state} without recording an outcome"
                ),
                state,
            )
        # A read writes nothing: the outcome is shown now and recorded by the reader's
        # settle() (target.py: `python -m jobfolder close`, under the job lock).
        return with_state(closed(again, *mapped), state)

    def cancel_job(self, job_dir: str, pid: int | None, grace: float) -> None:
        """Mark the cancel, signal the batch job (its supervisor ends the ranks and records
        `cancelled`), scancel it after ``grace``, wait until it left; record `cancelled`
        if nothing did."""
        self.login_host.write_atomic(posixpath.join(job_dir, CANCEL_REQUEST), b"cancel\n")
        state = query(self.slurm, pid) if pid is not None else None
        if pid is not None and state is not None and state.alive:
            if state.status == PENDING:  # nothing runs yet: a pending job takes no signal
                self.slurm(["scancel", str(pid)])
            else:
                self.slurm(["scancel", "--signal=TERM", "--full", str(pid)])
                if not self._left(pid, grace + 3.0):
                    self.slurm(["scancel", str(pid)])
            if not self._left(pid, LEAVE_S):
                raise VeriError(
                    f"Slurm job {pid} did not end within {LEAVE_S:.0f} s of scancel; see squeue",
                    key="job",
                )
        self._jobfolder(job_dir, "close", "--status", CANCELLED)

    def _left(self, job_id: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.alive(job_id):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def follow(
        self, path: str, pid: int | None, offset: int, done: Callable[[], bool], **options: Any
    ) -> Iterator[LogLine]:
        """Complete lines of ``path`` from ``offset``, read by offset, until ``done()``."""

        def read(off: int) -> bytes:
            try:
                return self.login_host.read_bytes(path, 1 << 30, off)
            except FileNotFoundError:
                return b""

        return follow_lines(read, done, offset, float(options.get("poll_s", 1.0)))


def with_state(record: JobRecord, state: SlurmState) -> JobRecord:
    """The record with what the controller says (`slurm_state`, `slurm_reason`): read-side
    keys like `lost`, never written to job.json."""
    view = cast(dict[str, Any], dict(record))
    view.update(slurm_job_id=str(state.job_id), slurm_state=state.state, slurm_reason=state.reason)
    return cast(JobRecord, view)


def open_slurm(options: SlurmOptions, trust: str | None = None) -> SlurmHost:
    """The login node of ``options`` (connected now when it is an SSH host)."""
    return SlurmHost(login_host(options.login, trust=trust, connect=True), options)


def login_host(
    login: str, *, trust: str | None = None, python: str | None = None, connect: bool = False
) -> Host:
    """`local`: this machine; else the SSH host (connected on first use unless ``connect``)."""
    if login == "local":
        from veri_tui.launch.local_host import LocalHost

        return LocalHost()
    from veri_tui.launch.ssh.host import SshHost

    if connect:
        return SshHost.open(login, trust=trust)
    return SshHost(login, trust=trust, python=python)
