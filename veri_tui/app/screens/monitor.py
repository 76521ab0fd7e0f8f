"""The run monitor: plan line pinned on top, progress and ETA, loss chart, rank-0 log tail,
and the failure panel when the job failed. Cancel ends every rank; detach leaves it running;
R resumes a failed or cancelled job (a new attempt in its folder) and follows it.

A thread worker follows the job through one handle held for its life (`jobs.open`: one
connection per host) and its watcher (`JobHandle.watch`, the follow that also hands over
each polled job record): it picks the metric lines out and posts one `JobUpdate` per poll.
The screen only renders what the updates carry: metric lines as readable rows in the log
tail (the launch facade's `log_row`), loss (and the DPO reward margin) in the chart. It
stops following when the job's record is gone (`NotFoundError`), and retries otherwise.
When the job has ended with measurements, a table sets them beside what its plan predicted
(the facade's `comparison_lines`).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Log, ProgressBar, Static
from textual.worker import get_current_worker

from veri_tui.app.messages import JobUpdate
from veri_tui.app.widgets.charts import LossChart
from veri_tui.app.widgets.failure_panel import FailurePanel
from veri_tui.errors import NotFoundError, VeriError
from veri_tui.jobfolder.contract.record import NOT_RECORDED, JobRecord
from veri_tui.jobfolder.contract.record import plan_line_of as spec_plan_line
from veri_tui.jobfolder.contract.status import Status, has_ended
from veri_tui.launch.jobs import comparison_lines, log_row, metric_of, pending_reason

POLL_S = 0.5


def fmt_duration(seconds: float) -> str:
    """`1m05s` / `42s` / `1h02m`: short enough for the status line at 80 columns."""
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def plan_line_of(record: JobRecord) -> str:
    """The `plan: dp=...` line the job was launched with (jobfolder.contract.record reads it)."""
    return spec_plan_line(record.get("spec"), NOT_RECORDED)


def points_of(metrics: list[dict[str, Any]], key: str) -> tuple[tuple[int, float], ...]:
    """(step, value) of the metric lines that carry a number under ``key``."""
    return tuple(
        (int(m["step"]), float(m[key]))
        for m in metrics
        if isinstance(m.get(key), int | float) and not isinstance(m.get(key), bool)
    )


class MonitorScreen(Screen[None]):
    """Watches one job until it ends (or the user detaches)."""

    BINDINGS = [
        Binding("c", "cancel_job", "Cancel job"),
        Binding("R", "resume_job", "Resume"),
        Binding("d,escape", "detach", "Detach"),
    ]

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self.record: JobRecord | None = None
        self.metrics: list[dict[str, Any]] = []
        self.status = str(Status.PENDING)
        self.log_offset = 0

    def compose(self) -> ComposeResult:
        yield Static(f"job {self.job_id}", id="mon-plan", markup=False)
        yield Static("status: connecting", id="mon-status", markup=False)
        yield ProgressBar(total=None, show_eta=False, show_percentage=True, id="progress")
        yield LossChart(id="loss")
        yield Static("", id="mon-measured", markup=False)
        yield FailurePanel(id="failure")
        yield Log(id="log-tail", max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(FailurePanel).display = False
        self.query_one("#mon-measured", Static).display = False  # until the job has ended
        # Without a total the bar animates at frame rate, which costs the CPU the ranks need:
        # it appears with the first metric line instead.
        self.query_one(ProgressBar).display = False
        self.follow()

    @work(thread=True, exclusive=True, group="follow")
    def follow(self) -> None:
        """Follow the job through the facade's watcher until it ends and its log is drained:
        one JobUpdate per poll that found something (an idle poll posts nothing)."""
        from veri_tui.launch import jobs

        worker = get_current_worker()
        offset, lines = self.log_offset, list[str]()
        last: JobRecord | None = None

        def post(record: JobRecord | None) -> None:
            nonlocal last
            if lines or record != last:
                metrics = [m for m in map(metric_of, lines) if m is not None]
                self.post_message(JobUpdate(self.job_id, record, lines[:], metrics))
                lines.clear()
                last = record

        def stop() -> bool:
            return worker.is_cancelled  # the screen was closed: end without waiting

        try:
            job = jobs.open(self.job_id)  # one target, one connection per host, for our life
        except VeriError as exc:
            self.post_message(JobUpdate(self.job_id, None, error=str(exc)))
            return  # no such job: nothing will appear by polling
        with job:
            while not worker.is_cancelled:
                try:
                    for line in job.watch(offset, post, stop, POLL_S):
                        lines.append(line.text)
                        offset = self.log_offset = line.end  # a resume follows on from here
                except NotFoundError as exc:  # its record is gone: polling shows nothing more
                    self.post_message(JobUpdate(self.job_id, None, error=str(exc)))
                    return
                except VeriError as exc:  # a host out of reach (UnreachableError), ...: retry
                    self.post_message(JobUpdate(self.job_id, None, error=str(exc)))
                except OSError as exc:  # a dropped connection (the host reconnects): retry
                    self.post_message(JobUpdate(self.job_id, None, error=str(exc)))
                else:
                    if not worker.is_cancelled:
                        post(last)  # the lines read after the poll that saw the job end
                    return
                last = None  # the error replaced the status line: show the record again
                time.sleep(1.0)  # then resume from the last complete line

    def on_job_update(self, update: JobUpdate) -> None:
        if update.error:
            self.query_one("#mon-status", Static).update(f"status: {update.error}")
            return
        if update.record is not None:
            self.record = update.record
            self.status = str(update.record.get("status", Status.PENDING))
            self.query_one("#mon-plan", Static).update(plan_line_of(update.record))
            self.query_one(FailurePanel).error = (
                update.record.get("error") if self.status == Status.FAILED else None
            )
            self._show_measured(update.record)
        if update.lines:
            self.query_one(Log).write_lines([log_row(line) for line in update.lines])
        # The failure panel or the progress bar may appear and shrink the log: keep its tail
        # (the newest lines) in view once the new layout is known.
        self.call_after_refresh(self.query_one(Log).scroll_end, animate=False)
        if update.metrics:
            # A resumed attempt runs again the steps after its checkpoint: they replace the
            # failed attempt's (metrics.jsonl is rewound the same way).
            first = int(update.metrics[0].get("step", 0))
            self.metrics = [m for m in self.metrics if int(m.get("step", 0)) < first]
            self.metrics += update.metrics
            chart = self.query_one(LossChart)
            chart.points = points_of(self.metrics, "loss")
            chart.margins = points_of(self.metrics, "rewards/margins")
            chart.evals = points_of(self.metrics, "eval_loss")
        self._show_progress()

    def _show_measured(self, record: JobRecord) -> None:
        """Measured against predicted, once the job has ended with measurements."""
        lines = comparison_lines(record) if has_ended(self.status) else []
        box = self.query_one("#mon-measured", Static)
        if lines and record.get("measured"):
            box.update("\n".join(lines))
            box.display = True

    def _show_progress(self) -> None:
        rec: JobRecord = self.record or {}
        last = self.metrics[-1] if self.metrics else {}
        step, total = int(last.get("step", 0)), last.get("total_steps")
        bar = self.query_one(ProgressBar)
        if total:
            bar.update(total=int(total), progress=step)
            bar.display = True
        waiting = pending_reason(rec)  # a Slurm job in its queue
        parts = [f"status {self.status}" + (f" ({waiting})" if waiting else "")]
        if total:
            parts.append(f"step {step}/{total}")
        started, ended = _ts(rec.get("started_at")), _ts(rec.get("ended_at"))
        if has_ended(self.status) and started and ended:
            parts.append(f"took {fmt_duration(ended - started)}")
        elif started and step and total:
            elapsed = time.time() - started
            parts.append(f"ETA {fmt_duration(elapsed / step * (int(total) - step))}")
        if last.get("tokens_per_s"):
            parts.append(f"{float(last['tokens_per_s']):,.0f} tok/s")
        parts.append(f"job {self.job_id} ({rec.get('host') or 'local'})")
        self.query_one("#mon-status", Static).update("  ".join(parts))
        self.set_class(self.status == Status.FAILED, "-failed")

    def action_detach(self) -> None:
        """Leave the job running; the jobs screen can reattach later."""
        self.app.pop_screen()

    def action_cancel_job(self) -> None:
        if has_ended(self.status):
            self.notify(f"job already {self.status}")
            return
        self.cancel_job()

    def action_resume_job(self) -> None:
        if self.status not in (Status.FAILED, Status.CANCELLED):
            self.notify(f"job {self.status}: only a failed or cancelled job resumes")
            return
        self.resume_job()

    @work(thread=True, group="resume")
    def resume_job(self) -> None:
        """A new attempt through the facade; the watcher then follows it from the log's end."""
        from veri_tui.launch import jobs

        try:
            record = jobs.resume(self.job_id)
        except Exception as exc:  # noqa: BLE001 - a refusal is shown to the user
            self.app.call_from_thread(self.notify, str(exc), severity="error")
            return
        attempt = len(record.get("attempts") or []) + 1
        self.app.call_from_thread(self.notify, f"job {self.job_id}: attempt {attempt} started")
        self.app.call_from_thread(self.follow)

    @work(thread=True, group="cancel")
    def cancel_job(self) -> None:
        """Cancel through the facade (it ends every rank, locally or over SSH)."""
        from veri_tui.launch import jobs

        try:
            jobs.cancel(self.job_id)
            self.app.call_from_thread(self.notify, f"cancelling {self.job_id}")
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.app.call_from_thread(self.notify, str(exc), severity="error")
