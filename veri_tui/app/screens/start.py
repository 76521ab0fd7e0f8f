"""The start screen: the app's first frame, then the opening plan line, then the editor.

Importing the planning core (pydantic models) and composing the plan editor take several
hundred milliseconds on a small machine, so the first frame is this one-line screen
(benchmarks/bench_app_start.py). Meanwhile a helper process plans the job the app opens on
(veri_tui.app.first_plan) and a thread worker imports the editor's module; the helper's
plan line is shown here as soon as it comes, and the editor replaces this screen once its
module is imported (it plans the same job itself): a slow helper never delays it. Without
a helper the editor opens after the first frame, as it always did.
"""

from __future__ import annotations

import subprocess

from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from veri_tui.app import first_plan
from veri_tui.app.messages import FirstPlanRead


class StartScreen(Screen):
    """Says what is loading, shows the helper's plan line, then swaps in the plan editor."""

    def __init__(self, model: str | None, helper: subprocess.Popen[str] | None = None) -> None:
        super().__init__()
        self.model = model
        self.helper = helper
        self.shown_plan_line = ""  # the helper's plan line, once shown

    def compose(self) -> ComposeResult:
        what = self.model or "the bundled tiny model"
        yield Static(
            f"veri-tui: loading the planning core and {what}...", id="start-note", markup=False
        )
        yield Static("", id="plan-line", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.helper is None:
            self.call_after_refresh(self._open_editor)
            return
        self._import_editor()
        self._read_helper(self.helper)

    @work(thread=True, group="start")
    def _import_editor(self) -> None:
        """The slow import, off the UI thread (which shows the helper's line meanwhile);
        the editor opens once it is done, whether or not the helper has answered."""
        import veri_tui.app.screens.plan_editor  # noqa: F401

        self.app.call_from_thread(self.call_after_refresh, self._open_editor)

    @work(thread=True, group="start")
    def _read_helper(self, helper: subprocess.Popen[str]) -> None:
        self.post_message(FirstPlanRead(first_plan.result(helper)))

    def on_first_plan_read(self, message: FirstPlanRead) -> None:
        answer = message.answer or {}
        if "plan_line" in answer and self.is_current:
            self.query_one("#start-note", Static).update(answer["model_line"])
            self.query_one("#plan-line", Static).update(answer["plan_line"])
            self.shown_plan_line = answer["plan_line"]

    def _open_editor(self) -> None:
        if not self.is_current:
            return  # opened already
        from veri_tui.app.screens.plan_editor import PlanEditorScreen

        self.app.switch_screen(PlanEditorScreen(self.model))
