"""The jobs screen: local and remote jobs in one table; Enter reattaches the monitor, R
resumes a failed or cancelled job (a new attempt in its folder, from its newest verified
checkpoint) and opens its monitor.

Listing reads job folders and may reach SSH hosts, so it runs in a thread worker; so does a
resume (it may re-plan and reach a host).
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from veri_tui.app.messages import JobsListed
from veri_tui.jobfolder.canary.canarytable import no_go_line
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.jobfolder.contract.status import Status
from veri_tui.launch.jobs import pending_reason

#: The statuses a job can be resumed from (a lost job reads as failed).
RESUMABLE = (Status.FAILED, Status.CANCELLED)


def job_row(rec: JobRecord) -> tuple[str, ...]:
    """Table cells for one job record: id, status, where, method, model, plan (dp/zero)."""
    spec = rec.get("spec") or {}
    rp = rec.get("resolved_parallelism") or spec.get("resolved_parallelism") or {}
    err = rec.get("error") or {}
    status = str(rec.get("status", "?"))
    if status == Status.FAILED and err.get("code"):
        status = f"failed {err['code']}"
    elif no_go_line(rec):  # stopped at its canary's gate (docs/canary.md)
        status = f"{status} (canary no-go)"
    waiting = pending_reason(rec)  # a Slurm job in its queue
    if waiting:
        status = f"pending ({waiting})"
    model = str(spec.get("model", ""))
    plan = f"dp={rp.get('data_parallel_size', '?')} z={rp.get('zero_stage', '?')}"
    return (
        str(rec.get("job_id", "?")),
        status,
        str(rec.get("host") or "local"),
        str(spec.get("method", "")),
        model if len(model) < 28 else "..." + model[-25:],
        plan,
    )


class JobsScreen(Screen[None]):
    """Every job veri-tui knows of, newest first."""

    BINDINGS = [
        Binding("enter", "open", "Open", show=True),
        Binding("r", "refresh", "Refresh"),
        Binding("R", "resume", "Resume"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("Jobs: Enter opens the run monitor", id="jobs-title", markup=False)
        table: DataTable[str] = DataTable(id="jobs-table", cursor_type="row")
        table.add_columns("job", "status", "where", "method", "model", "plan")
        yield table
        yield Static("", id="jobs-note", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        self.query_one("#jobs-note", Static).update("reading jobs...")
        self.list_jobs()

    @work(thread=True, exclusive=True, group="list-jobs")
    def list_jobs(self) -> None:
        from veri_tui.launch import jobs

        try:
            listed = jobs.list_jobs(settle=True)
            self.post_message(JobsListed(listed))
        except Exception as exc:  # noqa: BLE001 - shown in the note line
            self.post_message(JobsListed(error=str(exc)))

    def on_jobs_listed(self, message: JobsListed) -> None:
        table = self.query_one(DataTable)
        table.clear()
        records = sorted(message.jobs, key=lambda r: str(r.get("job_id", "")), reverse=True)
        self.statuses = {str(r.get("job_id")): str(r.get("status")) for r in records}
        for rec in records:
            table.add_row(*job_row(rec), key=str(rec.get("job_id")))
        note = message.error or f"{len(records)} job{'s' * (len(records) != 1)}"
        self.query_one("#jobs-note", Static).update(note)

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def _cursor_job(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def action_open(self) -> None:
        job_id = self._cursor_job()
        if job_id is not None:
            self._open(job_id)

    def action_resume(self) -> None:
        """Resume the highlighted job if it failed or was cancelled."""
        job_id = self._cursor_job()
        if job_id is None:
            return
        status = getattr(self, "statuses", {}).get(job_id)
        if status not in RESUMABLE:
            self.notify(f"job {job_id} is {status}: only a failed or cancelled job resumes")
            return
        self.notify(f"resuming {job_id}...")
        self.resume_job(job_id)

    @work(thread=True, group="resume")
    def resume_job(self, job_id: str) -> None:
        """Resume through the facade (locally or over SSH), then open the monitor."""
        from veri_tui.launch import jobs

        try:
            record = jobs.resume(job_id)
        except Exception as exc:  # noqa: BLE001 - a refusal is shown, not raised
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        attempt = len(record.get("attempts") or []) + 1
        self.app.call_from_thread(self.notify, f"job {job_id}: attempt {attempt} started")
        self.app.call_from_thread(self._open, job_id)

    def _open(self, job_id: str) -> None:
        from veri_tui.app.screens.monitor import MonitorScreen

        self.app.push_screen(MonitorScreen(job_id))
