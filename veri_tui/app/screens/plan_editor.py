"""The plan editor: the model, every knob, and what the planning core says about them;
Launch, and Trace (the bundled trainer's own step at the job's shapes on fake CUDA, in a
child process: docs/trace.md) beside it.

Each edit re-runs `job_from_fields` + `validate` (+ `plan_job` and `throughput_sweep` when
the knobs are valid) on the UI thread: they are pure arithmetic on the model's parameter
counts, well under a millisecond (benchmarks/bench_app_start.py measures it). Reading the
model's headers and counting the dataset's tokens for the cost are I/O and run in thread
workers; the count is cached (by file content), so a re-plan after it is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Static

from veri_tui import plan as core
from veri_tui.app.messages import ModelInfoRead, TokensCounted
from veri_tui.app.widgets.knob_form import FormValues, KnobForm
from veri_tui.app.widgets.plan_view import PlanView, show
from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.atomic import write_text_atomic

SWEEP_GPU_COUNTS = (1, 2, 4, 8)


class PlanEditorScreen(Screen[None]):
    """Home screen: pick a model, edit knobs, see the plan; launch from here."""

    BINDINGS = [
        Binding("ctrl+l", "launch", "Launch"),
        Binding("ctrl+g", "trace", "Trace"),
        Binding("ctrl+o", "pick_model", "Model"),
        Binding("ctrl+r", "pin", "Pin plan"),
        Binding("ctrl+y", "apply_suggestion(1)", "Apply fix"),
        Binding("ctrl+s", "export", "Export toml"),
    ]

    def __init__(self, model: str | None = None, initial: dict[str, Any] | None = None) -> None:
        super().__init__()
        job = core.load_job_config(None, model=model)
        self.model: str | None = job.model  # None: the bundled tiny model
        self.info: core.ModelInfo | None = None
        self.model_error: str | None = None  # the model's headers could not be read here
        self.errors: list[Refusal] = []
        self.job: core.JobConfig | None = None
        self.record: core.PlanRecord | None = None
        self._counting: tuple[str, str | None, str] | None = None  # tokens being counted
        self._initial = {"method": job.method, "gpu": job.gpu, "gpu_count": job.gpu_count}
        self._initial.update(initial or {})
        self._traced: FormValues | None = None  # the fields the trace shown was made for

    def compose(self) -> ComposeResult:
        with Vertical(id="plan-head"):
            yield Static(
                f"model {self.model_label}: reading headers...", id="model-line", markup=False
            )
            yield Static("", id="plan-line", markup=False)
        with Horizontal(id="plan-body"):
            yield KnobForm(list(core.GPU_CATALOG), self._initial, self.recompute, id="form")
            with Vertical(id="side"):
                with Horizontal(id="actions"):
                    yield Button("Launch ^l", id="launch", variant="primary", disabled=True)
                    yield Button("Trace ^g", id="trace", disabled=True)
                    yield Button("Model ^o", id="pick")
                    yield Button("Pin ^r", id="pin")
                trace_view = Static("", id="trace-view", markup=False)
                trace_view.display = False  # until a trace runs
                yield trace_view
                yield PlanView(id="plan-view")
        yield Footer()

    def on_mount(self) -> None:
        self.read_model(self.model)

    # -- model -------------------------------------------------------------------------

    @property
    def model_label(self) -> str:
        return self.model or "tiny-model (bundled)"

    @work(thread=True, exclusive=True, group="model-info")
    def read_model(self, model: str | None) -> None:
        """Read the safetensors headers (local files or Hub metadata) off the UI thread."""
        try:
            self.post_message(ModelInfoRead(model, core.read_model_info(model)))
        except VeriError as exc:
            self.post_message(ModelInfoRead(model, error=str(exc)))

    def on_model_info_read(self, message: ModelInfoRead) -> None:
        if message.model != self.model:
            return  # a late answer for a model the user already left
        line = self.query_one("#model-line", Static)
        self.model_error = message.error
        if message.error:
            self.info = None
            line.update(f"model {self.model_label}: {message.error}")
        elif message.info is not None:
            self.info = message.info
            line.update(f"model {self.model_label}: {message.info.parameter_count:,} parameters")
        self.recompute()

    def set_model(self, model: str) -> None:
        """Switch to another model; the plan waits for its headers."""
        self.model, self.info, self.record, self.model_error = model, None, None, None
        self.query_one("#model-line", Static).update(f"model {model}: reading headers...")
        self.recompute()
        self.read_model(model)

    # -- planning ----------------------------------------------------------------------

    def fields(self) -> FormValues:
        """The form's values plus the model: what `job_from_fields` takes."""
        values = self.query_one(KnobForm).values()
        return {**values, "model": self.model} if self.model else values

    def recompute(self) -> None:
        """Validate and plan the knobs as they stand; show errors beside their fields."""
        self.job, self.record = None, None
        try:
            self.job = core.job_from_fields(self.fields())
            self.errors = list(core.validate(self.job))
        except VeriError as exc:
            self.errors = list(exc.errors)
        by_key: dict[str, list[str]] = {}
        for err in self.errors:
            by_key.setdefault(err.key, []).append(err.message)
        leftover = self.query_one(KnobForm).set_errors(by_key)
        view = self.query_one(PlanView)
        view.show_errors([f"{k}: {m}" for k in leftover for m in by_key[k]])
        plan_line = self.query_one("#plan-line", Static)
        sweep: list[dict[str, Any]] = []
        current = None
        without = ""  # why the panes under the plan line are empty (none: a plan to come)
        if self.errors:
            n = len(self.errors)
            show(plan_line, f"plan refused: {n} error{'s' * (n != 1)}; fix the marked fields")
            without = "none while the plan is refused (fix the marked fields)"
        elif self.model_error is not None:
            show(plan_line, "plan: none here (the model cannot be read on this machine); "
                 "a launch host that has it plans it (ctrl+l)")  # fmt: skip
            without = "none here (the model cannot be read on this machine)"
        elif self.info is None or self.job is None:  # (no job: its errors were shown above)
            show(plan_line, "plan: waiting for the model's parameter counts")
        else:
            job = self.job
            # Only a cached token count here: counting runs in a worker, then re-plans.
            self.record = rec = core.plan_job(job, self.info, count_tokens=False)
            if rec.cost.get("pending"):
                self.count_later(job)
            show(plan_line, rec.plan_line)
            # A valid job always sweeps: gpu_counts it cannot run at come back as skipped
            # rows (e.g. a pinned gbs that does not split over 8 GPUs), which the chart names.
            sweep = core.throughput_sweep(job, self.info, SWEEP_GPU_COUNTS)
            current = (job.gpu_count, rec.resolved_parallelism["zero_stage"])
        plan_line.set_class(bool(self.errors), "-refused")
        view.show_record(self.record, sweep, current, without)
        self.query_one("#launch", Button).disabled = not self.can_launch
        self.query_one("#trace", Button).disabled = self.record is None
        if self._traced is not None and self._traced != self.fields():
            self._traced = None  # an edit: the trace shown belongs to another job
            self.query_one("#trace-view", Static).display = False

    def count_later(self, job: core.JobConfig) -> None:
        """Count the dataset's tokens off the UI thread, once per dataset/model/method."""
        key = (str(job.dataset), self.info.path if self.info else None, job.method)
        if key != self._counting:
            self._counting = key
            self.count_tokens(job, key)

    @work(thread=True, exclusive=True, group="tokens")
    def count_tokens(self, job: core.JobConfig, key: tuple[str, str | None, str]) -> None:
        """Fill the core's token cache (an error is remembered there and shown by the plan)."""
        from veri_tui.jobfolder.contract.errors import DataError
        from veri_tui.plan.cost import job_tokens

        try:
            job_tokens(job, key[1], count=True)
        except DataError:
            pass  # the core remembers it until the file changes: the re-plan shows it
        self.post_message(TokensCounted(key))

    def on_tokens_counted(self, message: TokensCounted) -> None:
        if message.key == self._counting:
            self._counting = None
            self.recompute()

    @property
    def can_launch(self) -> bool:
        """Launch needs a valid job and the model's headers read: with a plan, or without
        one when they cannot be read here (a host that has the model plans it there; the
        launch screen's preflight refuses it locally)."""
        return not self.errors and (self.record is not None or self.model_error is not None)

    # -- actions -----------------------------------------------------------------------

    def action_pin(self) -> None:
        """Copy resolved_parallelism into the knobs, so "auto" becomes an explicit choice."""
        if self.record is None:
            self.notify("no plan to pin yet", severity="warning")
            return
        self.query_one(KnobForm).set_values(self.record.pinned_hyperparameters())
        self.notify("pinned the resolved plan into the knobs")

    def action_apply_suggestion(self, number: int) -> None:
        """Apply suggestion `number` (1-based): its `set` knobs go into the form."""
        sugg = self.record.suggestions if self.record is not None else []
        if not 1 <= number <= len(sugg):
            self.notify("no suggestion to apply", severity="warning")
            return
        chosen = sugg[number - 1]
        self.query_one(KnobForm).set_values(chosen.set)
        self.notify(f"applied: {chosen.text}")

    def action_export(self) -> None:
        """Write the job as veri.toml in the working directory (aside, then renamed)."""
        if self.job is None:
            self.notify("fix the marked fields before exporting", severity="error")
            return
        target = Path(self.app.workdir) / "veri.toml"  # type: ignore[attr-defined]
        try:
            write_text_atomic(target, core.job_to_toml(self.job))  # never a half-written one
        except (OSError, ValueError) as exc:
            self.notify(f"cannot write veri.toml: {exc}", severity="error")
            return
        self.notify(f"wrote {target}")

    def action_pick_model(self) -> None:
        from veri_tui.app.screens.model_picker import ModelPickerScreen

        def chosen(model: str | None) -> None:
            if model:
                self.app.remember_model(model)  # type: ignore[attr-defined]
                self.set_model(model)

        self.app.push_screen(ModelPickerScreen(self.model), chosen)

    def action_launch(self) -> None:
        if not self.can_launch:
            self.notify("launch is disabled until every field is valid", severity="error")
            return
        from veri_tui.app.screens.launch import LaunchScreen

        self.app.push_screen(LaunchScreen(self.fields(), self.info))

    def action_trace(self) -> None:
        """Trace the planned job's step on fake CUDA (docs/trace.md) in a worker."""
        if self.record is None or self.job is None:
            self.notify("trace needs a plan: fix the marked fields first", severity="error")
            return
        self._traced = self.fields()
        ranks = self.record.resolved_parallelism["data_parallel_size"]
        view = self.query_one("#trace-view", Static)
        view.update(f"trace: running the trainer's step on {ranks} fake CUDA rank(s)...")
        view.display = True
        self.query_one("#trace", Button).disabled = True
        self.run_trace(self.job, self.record, self._traced)

    @work(thread=True, exclusive=True, group="trace")
    def run_trace(self, job: core.JobConfig, record: core.PlanRecord, fields: FormValues) -> None:
        """The trace's child process, off the UI thread; its lines (or one error) shown."""
        from veri_tui.launch import jobs

        try:
            text = "\n".join(jobs.trace_lines(jobs.trace(job, record), record))
        except VeriError as exc:
            text = "trace: " + "; ".join(str(e) for e in exc.errors)
        self.app.call_from_thread(self._show_trace, fields, text)

    def _show_trace(self, fields: FormValues, text: str) -> None:
        if fields == self._traced:  # not a trace of a job the user has since edited
            self.query_one("#trace-view", Static).update(text)
        self.query_one("#trace", Button).disabled = self.record is None

    @on(Button.Pressed, "#trace")
    def _trace_pressed(self) -> None:
        self.action_trace()

    @on(Button.Pressed, "#launch")
    def _launch_pressed(self) -> None:
        self.action_launch()

    @on(Button.Pressed, "#pick")
    def _pick_pressed(self) -> None:
        self.action_pick_model()

    @on(Button.Pressed, "#pin")
    def _pin_pressed(self) -> None:
        self.action_pin()
