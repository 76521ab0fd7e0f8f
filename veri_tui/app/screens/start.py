"""The first frame: a light screen shown while the planning core loads.

Importing the planning core (pydantic models) and composing the plan editor take several
hundred milliseconds on a small machine; painting this screen first keeps process start to
first frame close to a bare Textual app (benchmarks/bench_app_start.py). Right after that
frame the editor is built and replaces this screen.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static


class StartScreen(Screen):
    """Says what is loading; swaps itself for the plan editor after the first refresh."""

    def __init__(self, model: str | None) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        what = self.model or "the bundled tiny model"
        yield Static(
            f"veri-tui: loading the planning core and {what}...", id="start-note", markup=False
        )
        yield Footer()

    def on_mount(self) -> None:
        self.call_after_refresh(self._open_editor)

    def _open_editor(self) -> None:
        # Imported here, after the first frame: this is the slow import.
        from veri_tui.app.screens.plan_editor import PlanEditorScreen

        self.app.switch_screen(PlanEditorScreen(self.model))
