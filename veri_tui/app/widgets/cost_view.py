"""The job's time and cost under the throughput charts: the plan's `cost`, rendered.

The first line is the plan's own cost line (`cost: 2.4 h on 4 x L4-24GB = 9.6 GPU-hours,
~$7.70 at $0.80/GPU-hour`); under it how it was reached (steps, tokens, padded length) and
where the price comes from. It renders, it never computes: the plan editor re-plans on
every edit and counts the dataset's tokens in a worker (cached), so the figures follow the
knobs as they are typed.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from veri_tui.app.widgets.steady import show
from veri_tui.plan.cost import cost_line


def cost_text(cost: dict[str, Any] | None) -> Text:
    """The cost line, then the steps and tokens behind it and the price's source."""
    if cost is None:
        return Text("cost: no valid plan", style="dim")
    text = Text(cost_line(cost), style="bold" if cost.get("known") else "dim")
    if cost.get("known"):
        tokens = cost.get("dataset_tokens")
        counted = f"{tokens:,} tokens in " if tokens is not None else ""
        if cost.get("packed_from"):
            counted += f"{cost['packed_from']:,} samples packed in "
        text.append(
            f"\n  {cost['steps']:,} steps x {cost['step_time_s']:.3g} s "
            f"({cost['steps_per_epoch']:,}/epoch; {counted}{cost['dataset_rows']:,} rows, "
            f"{cost['sample_length']:,} tokens/sample padded)"
        )
    if cost.get("source"):
        text.append(f"\n  price: {cost['source']}", style="dim")
    return text


class CostView(Static):
    """The plan's time and cost; `show` takes the plan record's `cost` (None: no plan)."""

    DEFAULT_CSS = """
    CostView {
        height: auto;
        padding: 0 1;
        margin-bottom: 1;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", markup=False, **kwargs)
        self.cost: dict[str, Any] | None = None

    def show(self, cost: dict[str, Any] | None) -> None:
        """Render `cost` (only when it changed; a relayout only when its height did)."""
        if cost != self.cost or not self.content:
            self.cost = cost
            show(self, cost_text(cost))
