"""The Textual app object: screens, global bindings, command palette entries, recent models.

Thin on purpose: screens compose widgets, the planning core plans, the launch facade runs
jobs. The app holds only what every screen shares (VERI_HOME, the working directory for
exports, the recently used models).

The first screen is a one-line start screen (screens/start.py): importing the planning core
(pydantic models) and composing the plan editor take several hundred milliseconds on a
small machine, so the first frame is painted before they happen, the opening plan line
comes from a helper process (first_plan.py), and the editor replaces the start screen.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from veri_tui.app.screens.start import StartScreen
from veri_tui.jobfolder.contract.atomic import write_json_atomic

RECENT_MAX = 8


class VeriApp(App[int]):
    """veri-tui: plan, launch and watch multi-GPU fine-tuning."""

    CSS_PATH = "veri.tcss"
    TITLE = "veri-tui"
    BINDINGS = [
        Binding("ctrl+b", "jobs", "Jobs"),
        Binding("ctrl+t", "toggle_theme", "Theme"),
    ]

    def __init__(
        self,
        *,
        veri_home: Path,
        model: str | None = None,
        workdir: Path | None = None,
        theme: str = "textual-dark",
        first_plan: subprocess.Popen[str] | None = None,
        remembered: dict[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.first_plan = first_plan  # the helper planning the opening job (or None)
        self.remembered = remembered  # the opening job's answer from the last start (or None)
        self.veri_home = veri_home
        self.workdir = workdir or Path.cwd()
        self.initial_model = model
        self.theme = theme

    def on_mount(self) -> None:
        self.push_screen(StartScreen(self.initial_model, self.first_plan, self.remembered))

    # -- shared state ----------------------------------------------------------------

    @property
    def recent_path(self) -> Path:
        return self.veri_home / "app" / "recent.json"

    def recent_models(self) -> list[str]:
        """Models picked before, newest first (a missing or broken file means none)."""
        try:
            data = json.loads(self.recent_path.read_text())
        except (OSError, ValueError):
            return []
        return [str(m) for m in data if isinstance(m, str)] if isinstance(data, list) else []

    def remember_model(self, model: str) -> None:
        """Put `model` first in the recent list (written atomically:
        veri_tui.jobfolder.contract.atomic's
        writer)."""
        models = [model] + [m for m in self.recent_models() if m != model]
        self.recent_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.recent_path, models[:RECENT_MAX])

    # -- actions -----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No screen changes on the start screen: it replaces itself with the editor."""
        if action == "jobs" and isinstance(self.screen, StartScreen):
            return False
        return True

    def action_jobs(self) -> None:
        from veri_tui.app.screens.jobs import JobsScreen

        if not isinstance(self.screen, JobsScreen):
            self.push_screen(JobsScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def open_monitor(self, job_id: str) -> None:
        """Show the run monitor of `job_id` (after a launch, or from the jobs screen)."""
        from veri_tui.app.screens.monitor import MonitorScreen

        self.push_screen(MonitorScreen(job_id))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Command palette: the app's actions, plus the plan editor's when it is showing."""
        yield from super().get_system_commands(screen)
        yield SystemCommand("Jobs", "List local and remote jobs; reattach", self.action_jobs)
        yield SystemCommand("Toggle light/dark theme", "", self.action_toggle_theme)
        from veri_tui.app.screens.plan_editor import PlanEditorScreen

        if isinstance(screen, PlanEditorScreen):
            yield SystemCommand(
                "Pick model", "Bundled, HF cache, recent, path or Hub id", screen.action_pick_model
            )
            yield SystemCommand(
                "Launch", "Choose target, dataset, output; preflight", screen.action_launch
            )
            yield SystemCommand(
                "Trace",
                "The trainer's own step on fake CUDA: its memory beside the plan's",
                screen.action_trace,
            )
            yield SystemCommand(
                "Pin resolved plan", "Copy resolved_parallelism into the knobs", screen.action_pin
            )
            yield SystemCommand(
                "Export veri.toml", "Write the job to ./veri.toml", screen.action_export
            )
            suggestions = screen.record.suggestions if screen.record is not None else []
            for i, sugg in enumerate(suggestions, start=1):
                yield SystemCommand(
                    f"Apply suggestion {i}: {sugg.text}",
                    "Put its values into the knobs",
                    lambda n=i: screen.action_apply_suggestion(n),
                )
