"""The memory bar: the step's peak per GPU by part, against the GPU's memory and the budget.

Draws from the typed plan record (`PlanRecord`): `activations["peak"]` (veri_tui/plan/
peak.py: states, activations, logits and loss, FSDP2 units in flight or AdamW's step, the
overhead), `states_bytes_per_gpu` against `budget_bytes` (the auto decision's test), `fits`,
and `host_bytes_per_node` when cpu_offload puts the states in host memory. It names the
largest part and the knob that moves it. GB are 10^9 bytes with one decimal, as everywhere
in veri-tui.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from veri_tui.app.widgets.steady import refresh_steady
from veri_tui.plan.memory import gb
from veri_tui.plan.peak import PART_LABELS

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord

# (part, cell, style), drawn left to right; the states' style follows the budget test.
SEGMENTS = (
    ("states", "█", None),
    ("in_flight", "▓", "cyan"),
    ("optimizer_step", "▓", "magenta"),
    ("activations", "▒", "yellow"),
    ("logits", "▚", "bright_yellow"),
    ("overhead", "·", "dim"),
)


def fmt_gb(nbytes: float | int | None) -> str:
    """Bytes as the product shows them (`8.0 GB`, the core's format); `?` when unknown."""
    return "?" if nbytes is None else gb(nbytes)


class MemoryBar(Widget):
    """The peak's parts, each its own cell, the free memory dim, the budget marked `|`."""

    record: reactive[PlanRecord | None] = reactive(None)
    #: Why there is no record: a plan on its way, or none until the form is fixed.
    without: reactive[str] = reactive("waiting for a plan")

    def watch_record(self) -> None:
        refresh_steady(self)  # a new plan seldom changes the bar's height: no relayout then

    def render(self) -> Text:
        rec = self.record
        if rec is None:
            return Text(f"memory: {self.without}", style="dim")
        peak = rec.activations.get("peak")
        if peak is None:  # the model's shapes are unknown: states only
            return Text(f"GPU states {gb(rec.states_bytes_per_gpu)}")
        states, budget, fits = rec.states_bytes_per_gpu, rec.budget_bytes, rec.fits
        parts, memory = peak["parts"], peak["memory_bytes"]
        width = max(10, self.size.width - 2)
        scale = max(memory, peak["peak_bytes"], 1) * 1.02
        out = Text()
        out.append("GPU peak ", style="bold")
        out.append(gb(peak["peak_bytes"]), style="bold" if peak["fits"] else "bold red")
        out.append(f" of {gb(memory)} = ")
        out.append(" + ".join(
            f"{PART_LABELS[k]} {v / 1e9:.1f}" for k, v in parts.items() if v or k == "states"
        ) + "\n")  # fmt: skip
        runs, used = [], 0
        for part, cell, style in SEGMENTS:
            n = min(width - used, round(parts[part] / scale * width))
            runs.append((cell, n, style or ("green" if fits else "red")))
            used += n
        runs.append(("░", width - used, "dim"))
        mark = min(width - 1, round(budget / scale * width))
        cells = "".join(ch * n for ch, n, _ in runs)
        cells = cells[:mark] + "|" + cells[mark + 1 :]
        # Runs of one style each (a Text span per cell made this the slowest render).
        bar, pos = Text("["), 0
        for _, n, style in runs:
            bar.append(cells[pos : pos + n], style=style)
            pos += n
        bar.stylize("bold", 1 + mark, 2 + mark)
        bar.append("]\n")
        out.append_text(bar)
        if fits:
            out.append(
                f"states fit: {gb(budget - states)} of the {gb(budget)} budget left", style="green"
            )
        else:
            out.append(
                f"states do not fit: {gb(states - budget)} over the {gb(budget)} budget",
                style="red",
            )
        out.append(f"\nlargest: {PART_LABELS[peak['largest']]} ({gb(parts[peak['largest']])}): "
                   f"{peak['knob']}")  # fmt: skip
        if rec.resolved_parallelism["cpu_offload"]:
            out.append(f"\nhost memory per node (cpu_offload): {gb(rec.host_bytes_per_node)}")
        return out
