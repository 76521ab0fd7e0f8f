"""The memory bar: model states against the per-GPU budget, activations beside them.

Draws from the typed plan record (`PlanRecord`): `states_bytes_per_gpu`, `budget_bytes`,
`activations["bytes_per_gpu"]` (0 when the model's shapes are unknown), `fits`, and
`host_bytes_per_node` when cpu_offload puts the states in host memory. GB are 10^9 bytes
with one decimal, as everywhere in veri-tui.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from veri_tui.app.widgets.steady import refresh_steady
from veri_tui.plan.memory import gb

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord


def fmt_gb(nbytes: float | int | None) -> str:
    """Bytes as the product shows them (`8.0 GB`, the core's format); `?` when unknown."""
    return "?" if nbytes is None else gb(nbytes)


class MemoryBar(Widget):
    """States (solid), activations (shaded) and free budget, with the budget marked `|`."""

    record: reactive[PlanRecord | None] = reactive(None)

    def watch_record(self) -> None:
        refresh_steady(self)  # a new plan seldom changes the bar's height: no relayout then

    def render(self) -> Text:
        rec = self.record
        if rec is None:
            return Text("memory: waiting for a plan", style="dim")
        states, budget, fits = rec.states_bytes_per_gpu, rec.budget_bytes, rec.fits
        act = rec.activations["bytes_per_gpu"]
        offload = rec.resolved_parallelism["cpu_offload"]
        width = max(10, self.size.width - 2)
        scale = max(budget, states + act, 1) * 1.05
        n_states = min(width, round(states / scale * width))
        n_act = min(width - n_states, round(act / scale * width))
        mark = min(width - 1, round(budget / scale * width))
        n_free = width - n_states - n_act
        out = Text()
        out.append("GPU ", style="bold")
        out.append(f"states {gb(states)}", style="bold green" if fits else "bold red")
        out.append(f" + activations {gb(act)} of budget {gb(budget)}\n")
        # Runs of one style each (a Text span per cell made this the slowest render).
        runs = [("█", n_states, "green" if fits else "red"), ("▒", n_act, "yellow")]
        runs.append(("░", n_free, "dim"))
        cells = "".join(ch * n for ch, n, _ in runs)
        cells = cells[:mark] + "|" + cells[mark + 1 :]
        bar = Text("[")
        pos = 0
        for _, n, style in runs:
            bar.append(cells[pos : pos + n], style=style)
            pos += n
        bar.stylize("bold", 1 + mark, 2 + mark)
        bar.append("]\n")
        out.append_text(bar)
        if fits:
            out.append(f"fits: {gb(budget - states)} of the budget left", style="green")
        else:
            out.append(f"does not fit: {gb(states - budget)} over the budget", style="red")
        if offload:
            out.append(f"\nhost memory per node (cpu_offload): {gb(rec.host_bytes_per_node)}")
        return out
