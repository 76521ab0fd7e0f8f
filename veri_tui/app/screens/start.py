"""The start screen: the app's first frame, then the opening plan line, then the editor.

Importing the planning core (pydantic models) and composing the plan editor take several
hundred milliseconds on a small machine, so the first frame is this one-line screen
(benchmarks/bench_app_start.py). Meanwhile a helper process plans the job the app opens on
(veri_tui.app.first_plan); its line is shown here, then a thread worker imports the
editor's module (the import would slow the helper's frame if it ran beside it), and the
editor replaces this screen once its module is imported (it plans the same job itself). A
helper that has not answered within `HELPER_WAIT_S` is stopped and the worker plans the job
in this process; so it does without a helper (VERI_FIRST_PLAN=0, or no idle core), and a
start whose answer was remembered (first_plan.cached) shows it in its first frame.

Keys typed before the editor opens (`ctrl+o` right as the first frame appears) are kept and
given to the editor once it is on screen, in the order typed: the user sees the editor's
footer in the plan line's place a moment later and would otherwise lose them. Keys that
work here (the app's own bindings, e.g. ctrl+t, ctrl+q) run at once as usual.
"""

from __future__ import annotations

import subprocess

from textual import events, work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from veri_tui.app import first_plan
from veri_tui.app.messages import FirstPlanRead

#: How long the editor's import waits for the helper's answer before planning here.
HELPER_WAIT_S = 1.5


class StartScreen(Screen):
    """Says what is loading, shows the helper's plan line, then swaps in the plan editor."""

    def __init__(
        self,
        model: str | None,
        helper: subprocess.Popen[str] | None = None,
        remembered: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.helper = helper
        self.remembered = remembered  # the answer the last start planned (first_plan.cached)
        self.shown_plan_line = remembered["plan_line"] if remembered else ""
        self.early_keys: list[tuple[str, str | None]] = []  # (key, character), as typed

    def compose(self) -> ComposeResult:
        what = self.model or "the bundled tiny model"
        note = f"veri-tui: loading the planning core and {what}..."
        answer = self.remembered or {}
        yield Static(answer.get("model_line", note), id="start-note", markup=False)
        yield Static(answer.get("plan_line", ""), id="plan-line", markup=False)
        yield Footer()

    def on_key(self, event: events.Key) -> None:
        """Keep a key nothing here handles, for the editor (see the module docstring)."""
        binding = self.active_bindings.get(event.key)
        if binding is not None and binding.enabled:
            return  # the app's own binding runs now
        self.early_keys.append((event.key, event.character))
        event.stop()
        event.prevent_default()

    def on_mount(self) -> None:
        if self.helper is None:
            self._import_editor()
        else:
            # The editor's import holds the GIL for most of half a second: started beside the
            # helper's answer it delays the frame that shows it (1.9x a bare app's first frame
            # against 1.2x waiting, docs/app.md), while the editor opens only ~0.1 s later.
            self._read_helper(self.helper)

    @work(thread=True, group="start")
    def _import_editor(self) -> None:
        """The slow import, off the UI thread; then this process's own plan of the opening
        job (the core is imported by now), unless the helper's came first; then the editor."""
        import veri_tui.app.screens.plan_editor  # noqa: F401

        answer = None if self.shown_plan_line else first_plan.plan_answer(self.model)
        self.app.call_from_thread(self._ready, answer)

    def _ready(self, answer: dict[str, str] | None) -> None:
        """The editor can open: show our own plan line first if none is shown yet."""
        self._show(answer)
        self.call_after_refresh(self._open_editor)

    @work(thread=True, group="start")
    def _read_helper(self, helper: subprocess.Popen[str]) -> None:
        self.post_message(FirstPlanRead(first_plan.result(helper, timeout=HELPER_WAIT_S)))

    def on_first_plan_read(self, message: FirstPlanRead) -> None:
        self._show(message.answer)
        self.call_after_refresh(self._import_editor)

    def _show(self, answer: dict[str, str] | None) -> None:
        answer = answer or {}
        if "plan_line" in answer and self.is_current and not self.shown_plan_line:
            self.query_one("#start-note", Static).update(answer["model_line"])
            self.query_one("#plan-line", Static).update(answer["plan_line"])
            self.shown_plan_line = answer["plan_line"]
            first_plan.remember(self.model, answer)

    def _open_editor(self) -> None:
        if not self.is_current:
            return  # opened already
        if self.helper is not None and self.helper.poll() is None:
            self.helper.kill()  # its answer is no longer needed: give the core back
        from veri_tui.app.screens.plan_editor import PlanEditorScreen

        editor = PlanEditorScreen(self.model)
        self.app.switch_screen(editor)
        if self.early_keys:
            keys, self.early_keys = self.early_keys, []
            # After the editor's first refresh: it is mounted and focused, so each key goes
            # where it would have gone had it been typed there (its bindings, its inputs).
            editor.call_after_refresh(self._replay, keys)

    def _replay(self, keys: list[tuple[str, str | None]]) -> None:
        for key, character in keys:
            self.app.post_message(events.Key(key, character))
