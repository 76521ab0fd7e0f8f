"""The launch facade used by the CLI and the app: start, list, read, follow, cancel and
resume jobs (a resume is a new attempt of an ended job in its own folder).

Local jobs go to `LocalTarget`; ``host`` goes to the SSH target in ``veri_tui.launch.ssh``,
looked up lazily (paramiko is imported only when a host is used). The seam with the SSH module
is documented in docs/jobs.md: ``launch(job_config, plan_record, host=..., trust_host=...,
wait=...) -> job_id``, ``preflight_rows(job_config, host=..., trust_host=...) -> rows``,
``list_jobs() -> records`` (each with ``host`` set) and ``target_for_job(job_id) -> Target |
None``.
"""

from __future__ import annotations

import importlib
import importlib.util
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from jobfolder.attempts import resume_refusal
from jobfolder.status import has_ended
from veri_tui.errors import VeriError
from veri_tui.launch.diskcheck import check_local
from veri_tui.launch.local import LocalTarget, check_devices
from veri_tui.launch.memcheck import check_local as check_memory
from veri_tui.launch.records import LogLine, follow_lines
from veri_tui.launch.spec import build_record, check_job, new_job_id


def _ssh() -> ModuleType:
    """The SSH target module, imported on first use; a clear error while it is missing."""
    try:
        mod = importlib.import_module("veri_tui.launch.ssh")
    except ImportError as exc:
        if exc.name and exc.name.startswith("veri_tui.launch.ssh"):
            raise VeriError(
                "launching over SSH is not available in this build; run without --host",
                key="host",
            ) from None
        raise
    if not hasattr(mod, "launch"):
        raise VeriError(
            "launching over SSH is not available in this build; run without --host", key="host"
        )
    return mod


def launch(
    job_config: Any,
    plan_record: Any,
    host: str | Sequence[str] | None = None,
    trust_host: str | None = None,
    wait: bool = False,
) -> str:
    """Validate, write the job folder and start the job detached; returns the job id.

    ``job_config`` is a veri_tui.plan.JobConfig, ``plan_record`` its PlanRecord. Raises
    VeriError for anything `plan` refuses, a model not on disk or a missing dataset, before
    anything starts. ``wait`` blocks until the job has ended. ``plan_record`` None: planned
    here; with ``host`` the SSH side always plans on what the host has (after its
    preflight), and ``plan_record`` is not used. Several hosts: one multi-node job, one node
    each, node 0 first (veri_tui.launch.ssh.multinode).
    """
    if host is not None:
        return _ssh().launch(job_config, plan_record, host=host, trust_host=trust_host, wait=wait)
    check_devices(int(job_config.gpu_count), job_config.hyperparameters.load_in_4bit)
    if plan_record is None:
        from veri_tui.plan import plan_job

        plan_record = plan_job(job_config)  # refuses a model this machine cannot read
    target = LocalTarget()
    job_id = new_job_id()
    while target.job_dir(job_id).exists():  # same second, same random suffix: draw again
        job_id = new_job_id()
    record = build_record(job_config, plan_record, job_id, target.job_dir(job_id))
    check_memory(plan_record)  # refused before anything is created
    check_local(plan_record.disk, target.jobs_dir, Path(record["spec"]["output_dir"]))
    target.start(record)
    if wait:
        target.wait(job_id)
    return job_id


def preflight(
    job_config: Any,
    plan_record: Any = None,
    host: str | Sequence[str] | None = None,
    trust_host: str | None = None,
) -> list[tuple[str, bool, str]]:
    """What `launch` would check, starting nothing: (check, ok, detail) rows, every
    refusal a row with ok False.

    Locally: the plan (``plan_record``, else planned here), the GPUs `nvidia-smi` lists, a
    dry run of the job record (model folder, dataset, output dir) and whether torch is
    installed. With ``host``: the SSH side's preflight (python, torch, GPUs, disk, the model
    counted over SFTP, --output on the host) and the plan for what the host has;
    ``plan_record`` is not used. Several hosts (a list, else the job's ``hosts``): every
    node's rows labelled `node <k> (<host>)`, the layout row (`nodes: 2 x 1 GPUs (a, b)`),
    the rendezvous probe and the plan, as the multi-node launch checks them. A host that
    cannot be reached raises VeriError (``UnknownHostKeyError`` for an unknown host key, so
    a caller can ask to trust it).
    """
    hosts = [host] if isinstance(host, str) else list(host or job_config.hosts or [])
    if len(hosts) > 1:
        _ssh()  # a clear error when SSH support is missing
        from veri_tui.launch.ssh.multinode_checks import multinode_rows

        return multinode_rows(job_config, hosts, trust_host)
    if hosts:
        return _ssh().preflight_rows(job_config, host=hosts[0], trust_host=trust_host)
    rows: list[tuple[str, bool, str]] = []
    problems: list[Any] = []

    def collect(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except VeriError as exc:
            problems.extend(exc.errors)
            return None

    if plan_record is None:
        from veri_tui.plan import plan_job

        plan_record = collect(lambda: plan_job(job_config))
    collect(
        lambda: check_devices(int(job_config.gpu_count), job_config.hyperparameters.load_in_4bit)
    )
    if plan_record is not None:
        rows.append(("plan", True, plan_record.plan_line.removeprefix("plan: ")))
        # A dry run of the record `launch` writes: it resolves and checks the model folder,
        # the dataset and the output dir; the folder it names is thrown away.
        with tempfile.TemporaryDirectory() as tmp:
            rec = collect(lambda: build_record(job_config, plan_record, "x", Path(tmp) / "job"))
        if rec is not None:
            spec = rec["spec"]
            rows += [("model", True, spec["model_path"]), ("dataset", True, spec["dataset"])]
            output = spec["output_dir"] if job_config.output else "<job folder>/output"
            rows.append(("output", True, output))
            jobs_dir = LocalTarget().jobs_dir  # where the job folder will be
            out_dir = Path(spec["output_dir"]) if job_config.output else jobs_dir
            disk = collect(lambda: check_local(plan_record.disk, jobs_dir, out_dir))
            rows += [disk] if disk else []
        memory = collect(lambda: check_memory(plan_record))
        rows += [memory] if memory else []
    else:
        collect(lambda: check_job(job_config))  # no plan: the dataset and output still checked
    # find_spec locates torch without importing it (the app's process stays torch-free); the
    # supervisor runs `python -m torch.distributed.run` with this interpreter.
    has_torch = importlib.util.find_spec("torch") is not None
    rows.append(("torch", has_torch, "installed" if has_torch else "missing: pip install torch"))
    # A refusal found both by planning and by check_job is shown once.
    return rows + [(e.key, False, e.message) for e in dict.fromkeys(problems)]


def _remote_module() -> ModuleType | None:
    try:
        return _ssh()
    except VeriError:
        return None


def list_jobs() -> list[dict[str, Any]]:
    """Local jobs, then the remote jobs this machine launched (when SSH support is present)."""
    jobs = LocalTarget().list_jobs()
    ssh = _remote_module()
    if ssh is not None and hasattr(ssh, "list_jobs"):
        jobs += ssh.list_jobs()
    _calibrate(jobs)
    return jobs


def target_for(job_id: str) -> Any:
    """The target holding ``job_id``: local when its folder is here, else the SSH module's."""
    local = LocalTarget()
    if (local.job_dir(job_id) / "job.json").is_file():
        return local
    ssh = _remote_module()
    remote = ssh.target_for_job(job_id) if ssh and hasattr(ssh, "target_for_job") else None
    if remote is None:
        raise VeriError(f"no job {job_id}; `veri-tui jobs` lists them", key="job")
    return remote


def get_job(job_id: str) -> dict[str, Any]:
    """The job's record (job.json, with a lost supervisor reported as failed). A job that
    completed with measurements is folded into the calibration here, once."""
    record = target_for(job_id).get_job(job_id)
    _calibrate([record])
    return record


def _calibrate(records: list[dict[str, Any]]) -> None:
    """Fold completed, measured jobs into $VERI_HOME/calibration.json (launch/calibrate.py);
    a calibration file that cannot be written never keeps a job from being read."""
    from veri_tui.launch.calibrate import fold_jobs

    try:
        fold_jobs(records)
    except OSError:
        pass


def read_log(job_id: str, offset: int = 0) -> bytes:
    """The rank-0 log from byte ``offset`` to its current end."""
    return target_for(job_id).read_log(job_id, offset)


def follow_log(job_id: str, offset: int = 0) -> Iterator[LogLine]:
    """Complete rank-0 log lines from ``offset`` until the job ends (``LogLine.end`` is the
    offset to resume from)."""
    return target_for(job_id).follow_log(job_id, offset)


def watch(
    job_id: str,
    offset: int = 0,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    stop: Callable[[], bool] | None = None,
    poll_s: float = 0.5,
) -> Iterator[LogLine]:
    """`follow_log` for a watcher that also shows the job record: polls it every ``poll_s``
    and hands each one to ``on_record`` before the log read that follows it (so lines and
    record arrive in step, and the job's end is seen with every line written before it).

    Ends once the job has ended and its log is drained, or as soon as ``stop()`` is true (a
    closed screen must not keep its thread until the job ends). Reads the log by offset
    through `read_log`, on either target.
    """

    def done() -> bool:
        if stop is not None and stop():
            return True
        record = get_job(job_id)
        if on_record is not None:
            on_record(record)
        return has_ended(record)

    return follow_lines(lambda off: read_log(job_id, off), done, offset, poll_s)


def resume(
    job_id: str, gpu_count: int | None = None, sets: Sequence[str] = (), wait: bool = False
) -> dict[str, Any]:
    """A new attempt of an ended job in its own folder, from its newest verified checkpoint;
    returns the record (pending), or the final one with ``wait``.

    The same plan, unless ``gpu_count`` or ``sets`` (`KEY=VALUE`) change it: then the job is
    planned again keeping its global batch (veri_tui.launch.replan), here or on its host.
    A multi-node job resumes on every node from the newest step committed and verified on
    all of them, on its own layout and plan (veri_tui.launch.ssh.multinode_resume).
    VeriError: a job that runs or succeeded, a gpu_count that cannot split the batch (or
    changes a multi-node job's), any refusal of the new plan; nothing is changed then.
    """
    from veri_tui.launch.replan import resume_spec

    target = target_for(job_id)
    multi = getattr(target, "resume_record", None)  # a multi-node job: nothing re-planned
    record = multi(gpu_count, sets) if multi else target.get_job(job_id)
    refused = resume_refusal(record, supervisor_alive=not has_ended(record))
    if refused is not None:
        raise VeriError(refused.message, key=refused.key)
    if multi:
        spec = None
    elif isinstance(target, LocalTarget):
        if gpu_count is not None:
            check_devices(int(gpu_count))
        spec = resume_spec(record, gpu_count, sets, _plan_here)
    else:
        spec = resume_spec(record, gpu_count, sets, target.plan_for_resume)
    record = target.resume(job_id, spec)
    return target.wait(job_id) if wait else record


def _plan_here(job: Any) -> tuple[Any, Any]:
    from veri_tui.plan import plan_job

    return job, plan_job(job)


def cancel(job_id: str) -> dict[str, Any]:
    """End every rank of the job; returns the final record (status cancelled unless it had
    already ended)."""
    return target_for(job_id).cancel(job_id)
