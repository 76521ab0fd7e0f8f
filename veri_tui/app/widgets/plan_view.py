"""The right-hand side of the plan editor: errors, memory, warnings, suggestions, tokens/s,
charts, cost.

Fed the typed plan record (`PlanRecord`, None when there is no valid plan) plus the
throughput sweep; it renders, it never computes. Suggestions are numbered so the screen's
"apply" binding can name one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from veri_tui.app.widgets.charts import ThroughputChart
from veri_tui.app.widgets.cost_view import CostView
from veri_tui.app.widgets.memory_bar import MemoryBar
from veri_tui.app.widgets.steady import show
from veri_tui.plan.html import throughput_text
from veri_tui.plan.suggest import ways_out_title

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord

__all__ = ["PlanView", "decision_trace", "show"]


def decision_trace(record: PlanRecord) -> list[str]:
    """The header lines, then the rest of the decision trace, indented. The header's own
    `decision:` line is the trace's first entry, so it is not repeated."""
    trace = record.resolved_parallelism.get("decision_trace") or []
    return [*record.header_lines, *(f"  {t}" for t in trace[1:])]


class PlanView(VerticalScroll):
    """Everything the plan says about the knobs as they stand."""

    # What `_show_below` will show, when one is scheduled: (record, sweep, current).
    _below: tuple[PlanRecord | None, tuple[dict[str, Any], ...], tuple[int, int] | None] | None
    _below = None

    def compose(self) -> ComposeResult:
        yield Static("", id="general-errors", classes="errors", markup=False)
        yield MemoryBar(id="memory")
        yield Static("", id="warnings", classes="warnings", markup=False)
        yield Static("", id="suggestions", markup=False)
        yield Static("", id="throughput-line", markup=False)  # the plan's own tokens/s
        yield ThroughputChart(id="throughput")
        yield CostView(id="cost")
        yield Static("", id="decision-trace", classes="trace", markup=False)

    def show_errors(self, lines: list[str]) -> None:
        """Errors that have no field of their own in the form (model, dataset, ...)."""
        box = self.query_one("#general-errors", Static)
        show(box, "\n".join(lines))
        box.display = bool(lines)

    def show_record(
        self,
        record: PlanRecord | None,
        sweep: list[dict[str, Any]],
        current: tuple[int, int] | None,
        without: str = "",
    ) -> None:
        """Render a plan record (None: no valid plan right now, keep the panes empty, the
        memory bar and the chart saying `without`: why, e.g. none while the plan is refused).

        The memory bar, warnings and suggestions are updated now, the panes under the
        charts one frame later (`_show_below`): Textual repaints the box around everything
        changed in a frame, and the plan line on top with the trace at the bottom made that
        box the whole screen (every field of the form repainted on each keystroke). Keys
        typed before that frame only change what it will show (the charts are built once).
        """
        bar = self.query_one(MemoryBar)
        if bar.record != record:
            bar.record = record
        bar.without = without or "waiting for a plan"
        self.query_one(ThroughputChart).without = without or "no estimate yet"
        warnings = record.warnings if record else []
        show(
            self.query_one("#warnings", Static),
            Text("\n".join(f"warning: {w}" for w in warnings), style="yellow"),
        )
        self.query_one("#warnings").display = bool(warnings)
        sugg = record.suggestions if record else []
        text = Text()
        if sugg:
            text.append(f"{ways_out_title(sugg)} (ctrl+y applies 1):\n", style="bold")
            for i, s in enumerate(sugg[:9], start=1):
                text.append(f" {i}. {s.text}\n")
        show(self.query_one("#suggestions", Static), text)
        self.query_one("#suggestions").display = bool(sugg)
        if self._below is None:
            self.call_after_refresh(self._show_below)
        self._below = (record, tuple(sweep), current)

    def _show_below(self) -> None:
        """The plan's throughput line (what `veri-tui plan` prints: tokens/s, step time,
        scaling efficiency), the throughput charts (two plotext builds, ~15 ms), the cost
        and the trace."""
        if self._below is None:
            return
        (record, sweep, current), self._below = self._below, None
        line = self.query_one("#throughput-line", Static)
        show(line, throughput_text(record.throughput) if record else "")
        line.display = record is not None
        chart = self.query_one(ThroughputChart)
        if chart.sweep != sweep or chart.current != current:
            chart.sweep, chart.current = sweep, current
        self.query_one(CostView).show(record.cost if record else None)
        trace = decision_trace(record) if record else []
        show(self.query_one("#decision-trace", Static), "\n".join(trace))
