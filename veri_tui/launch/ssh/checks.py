"""What a host can do for a job, asked before anything is uploaded: the preflight rows the
launch facade (and the app's launch screen) shows, and the plan made for the host
(`veri-tui plan --host`).

Both reuse the SSH launch's own steps (`preflight_job`, `check_output`, `plan_for_host`), so
a check passes here exactly when `launch --host` would pass it.
"""

from __future__ import annotations

from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.diskcheck import refusals, row
from veri_tui.launch.spec import check_job, local_dataset
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.launch import check_output, plan_for_host, preflight_job
from veri_tui.launch.ssh.preflight import check_memory, remote_places

Row = tuple[str, bool, str]


def preflight_rows(job: Any, *, host: str, trust_host: str | None = None) -> list[Row]:
    """(check, ok, detail) rows for launching `job` on `host`: the job's own refusals and its
    dataset here (it is uploaded from here), the host's facts and problems, the output dir
    on the host, and the plan for the host's GPUs. Problems are rows with ok False; a host
    that cannot be reached raises VeriError (UnknownHostKeyError for an unknown key)."""
    problems: list[Refusal] = []
    try:
        check_job(job, output_here=False)  # --output is a path on the host: checked there
        dataset_bytes = local_dataset(job).stat().st_size
    except VeriError as exc:
        problems += exc.errors
        dataset_bytes = 0
    conn = Connection.open(host, trust=trust_host)
    try:
        pf = preflight_job(conn, job, dataset_bytes)
        problems += pf.problems
        rows: list[Row] = [("host", True, line) for line in pf.summary()]
        if job.output:
            try:
                job = check_output(conn, job, pf)
                rows.append(("output", True, f"{job.output} on {host}"))
            except VeriError as exc:
                problems += exc.errors
        places = remote_places(conn, pf, job.output)  # free space where the job writes
    finally:
        conn.close()
    if job.model is None or pf.model_info is not None:  # the model's counts are known
        try:
            _, plan = plan_for_host(job, pf)
            rows.insert(0, ("plan", True, plan.plan_line.removeprefix("plan: ")))
            try:
                rows.append(check_memory(pf, plan))
            except VeriError as exc:
                problems += exc.errors
            too_small = refusals(plan.disk, *places)
            problems += too_small
            rows += [] if too_small else [row(plan.disk, *places)]
        except VeriError as exc:
            problems += exc.errors
    # The job's own refusals come from check_job and again from planning: show each once.
    return rows + [(e.key, False, e.message) for e in dict.fromkeys(problems)]


def plan_on_host(job: Any, *, host: str | list[str], trust_host: str | None = None) -> Any:
    """`job` planned for what `host` has, as `launch --host` would plan it: the detected
    GPUs as `custom-<GB>GB` with their real memory, the model's headers read over SFTP
    there. Raises VeriError with the job's own refusals (before connecting), else with
    every preflight problem (what `launch --host` would refuse)."""
    from veri_tui.plan import validate

    if not isinstance(host, str) and len(host) > 1:
        from veri_tui.launch.ssh.multinode import plan_nodes

        return plan_nodes(job, list(host), trust_host)  # several hosts: one node each
    host = host if isinstance(host, str) else host[0]
    errors = validate(job)
    if errors:
        raise VeriError(errors)
    conn = Connection.open(host, trust=trust_host)
    try:
        pf = preflight_job(conn, job)
    finally:
        conn.close()
    pf.check()
    return plan_for_host(job, pf)[1]
