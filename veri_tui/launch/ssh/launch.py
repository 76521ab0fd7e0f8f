"""Launching a job over SSH: preflight, plan for the detected GPU, upload, start detached.

The job folder is built aside on the remote host (`.<id>.tmp`: the trainer package, the
dataset, the bundled model when none was given, job.json) and renamed into place with
`posix_rename`, so the remote folder never holds a half-made job. The supervisor is started
with `setsid nohup ... >file 2>&1 </dev/null & echo $!` (it must outlive the SSH session:
field notes), every path quoted.
"""

from __future__ import annotations

import posixpath
from typing import Any

from veri_tui.errors import VeriError
from veri_tui.launch.spec import check_job, local_dataset, make_record, new_job_id
from veri_tui.launch.ssh import files, registry
from veri_tui.launch.ssh.connection import Connection, command_line
from veri_tui.launch.ssh.preflight import (
    Preflight,
    check_disk,
    check_memory,
    remote_python,
    run_preflight,
)
from veri_tui.launch.ssh.remote_model import expand_home
from veri_tui.launch.ssh.target import RemoteTarget

#: The packages a job's host runs, copied into its folder's pkg/ (on PYTHONPATH there).
UPLOADED = ("trainer", "jobfolder")


def check_output(conn: Connection, job: Any, pf: Preflight) -> Any:
    """The output dir is a path on the host: `~` expanded there, refused when not empty."""
    output = expand_home(job.output, pf.home)
    if not output.startswith("/"):
        raise VeriError(f"{job.output}: give an absolute or ~/ path on {pf.host}", key="output")
    sftp = conn.sftp()
    if files.exists(sftp, output) and (not files.is_dir(sftp, output) or sftp.listdir(output)):
        raise VeriError(
            f"{output} already exists on {pf.host} and is not empty; choose another --output",
            key="output",
        )
    return job.model_copy(update={"output": output})


def preflight_job(conn: Connection, job: Any, dataset_bytes: int = 0) -> Preflight:
    """`run_preflight` for this job: its model, its gpu_count, and whether the artifact is a
    whole model (full fine-tune: the disk must hold it) or an adapter."""
    return run_preflight(
        conn,
        model=job.model,
        gpu_count=int(job.gpu_count),
        full_finetune=not job.hyperparameters.lora_rank,
        dataset_bytes=dataset_bytes,
    )


def plan_for_host(job: Any, pf: Preflight) -> tuple[Any, Any]:
    """The job as it will run on the host (detected GPU with its real memory) and its plan."""
    from veri_tui.plan import plan_job, read_model_info

    if pf.gpu_name:
        job = job.model_copy(update={"gpu": pf.gpu_name})
    info = pf.model_info if pf.model_info is not None else read_model_info(None)
    return job, plan_job(job, info, host=pf.host)  # calibrated by this host's runs


def remote_record(
    job: Any, plan: Any, job_id: str, job_dir: str, model_path: str, host: str, pf: Preflight
) -> dict[str, Any]:
    """job.json for the remote folder: the local record's layout (`spec.make_record`) with
    remote paths, plus what the preflight found."""
    record = make_record(
        job,
        plan,
        job_id,
        model_path=model_path,
        dataset=posixpath.join(job_dir, "data", local_dataset(job).name),
        output_dir=job.output or posixpath.join(job_dir, "output"),
        host=host,
        model_name=job.model or "tiny-model (bundled)",
    )
    record["preflight"] = pf.summary()
    return record


def _upload(conn: Connection, job: Any, record: dict[str, Any], job_dir: str) -> None:
    """Build the folder as `.<id>.tmp` beside its final place, then rename it in."""
    sftp = conn.sftp()
    # Named after the folder: a multi-node job's nodes may share one home (NFS).
    tmp = posixpath.join(posixpath.dirname(job_dir), f".{posixpath.basename(job_dir)}.tmp")
    for sub in ("pids", "failures", "data", "pkg"):
        files.makedirs(sftp, posixpath.join(tmp, sub))
    for package in UPLOADED:  # the rank program and the job folder's (its supervisor)
        files.upload_package(sftp, files.package_dir(package), posixpath.join(tmp, "pkg", package))
    dataset = local_dataset(job)
    files.upload_file(sftp, dataset, posixpath.join(tmp, "data", dataset.name))
    if not job.model:
        from veri_tui.plan.sources import bundled_tiny_model

        files.makedirs(sftp, posixpath.join(tmp, "model"))
        for src in sorted(bundled_tiny_model().iterdir()):
            if src.is_file():
                files.upload_file(sftp, src, posixpath.join(tmp, "model", src.name))
    files.write_json(sftp, posixpath.join(tmp, "job.json"), record)
    sftp.posix_rename(tmp, job_dir)


def start_supervisor(conn: Connection, job_dir: str, python: str) -> int:
    """Start the supervisor detached from the session; returns its pid."""
    run = command_line(
        ["setsid", "nohup", "env", f"PYTHONPATH={posixpath.join(job_dir, 'pkg')}", python,
         "-m", "jobfolder.supervise", "--job", posixpath.join(job_dir, "job.json")]
    )  # fmt: skip
    out = command_line([posixpath.join(job_dir, "supervisor.log")])
    res = conn.run_line(f"{run} >{out} 2>&1 </dev/null & echo $!", timeout=30)
    try:
        return int(res.stdout.split()[-1])
    except (ValueError, IndexError):
        raise VeriError(f"starting the job failed: {res.error_line()}", key="host") from None


def launch(
    job_config: Any,
    plan_record: Any = None,
    *,
    host: str | list[str],
    trust_host: str | None = None,
    wait: bool = False,
) -> str:
    """Preflight `host`, plan for what it has, upload and start; returns the job id.

    Several hosts make a multi-node job (multinode.py), one node each, node 0 first.

    `plan_record` (planned on this machine, or None: the CLI does not plan for a host) is
    not used: the plan is made from the model's headers read on the host and the GPU detected
    there. The model and `--output` are paths on the host, checked there, never here.
    """
    hosts = [host] if isinstance(host, str) else list(host)
    if len(hosts) > 1:
        from veri_tui.launch.ssh.multinode import launch_nodes

        return launch_nodes(job_config, hosts, trust_host=trust_host, wait=wait)
    host = hosts[0]
    check_job(job_config, output_here=False)  # --output is a path on the host: checked there
    conn = Connection.open(host, trust=trust_host)
    try:
        pf = preflight_job(conn, job_config, local_dataset(job_config).stat().st_size)
        pf.check()
        if job_config.output:
            job_config = check_output(conn, job_config, pf)
        job, plan = plan_for_host(job_config, pf)
        check_memory(pf, plan)  # before anything is created there
        check_disk(conn, pf, plan.disk, job.output)
        job_id = new_job_id()
        jobs_dir = posixpath.join(pf.veri_home, "jobs")
        files.makedirs(conn.sftp(), jobs_dir)
        job_dir = posixpath.join(jobs_dir, job_id)
        model_path = pf.model_path or posixpath.join(job_dir, "model")
        record = remote_record(job, plan, job_id, job_dir, model_path, host, pf)
        _upload(conn, job, record, job_dir)
        python = remote_python()
        pid = start_supervisor(conn, job_dir, python)
        registry.save(registry.RegistryEntry(job_id, host, job_dir, pid, python, record))
        if wait:
            RemoteTarget(host, conn=conn).wait(job_id)
        return job_id
    finally:
        conn.close()
