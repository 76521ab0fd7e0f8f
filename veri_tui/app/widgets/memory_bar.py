"""The memory bar: model states against the per-GPU budget, activations beside them.

Draws from a plan record (`PlanRecord.to_dict()`): `states_bytes_per_gpu`, `budget_bytes`,
`activations`, `fits`, and `host_bytes_per_node` when cpu_offload puts the states in host
memory. GB are 10^9 bytes with one decimal, as everywhere in veri-tui.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from veri_tui.plan.memory import gb


def fmt_gb(nbytes: float | int | None) -> str:
    """Bytes as the product shows them (`8.0 GB`, the core's format); `?` when unknown."""
    return "?" if nbytes is None else gb(nbytes)


def activation_bytes(record: dict[str, Any]) -> int | None:
    """The per-GPU activation estimate in a plan record, whichever form the core used."""
    act = record.get("activations")
    if isinstance(act, int | float):
        return int(act)
    if isinstance(act, dict):
        for key in ("bytes_per_gpu", "activation_bytes_per_gpu", "bytes", "total_bytes"):
            if isinstance(act.get(key), int | float):
                return int(act[key])
    return None


class MemoryBar(Widget):
    """States (solid), activations (shaded) and free budget, with the budget marked `|`."""

    record: reactive[dict[str, Any] | None] = reactive(None, layout=True)

    def render(self) -> Text:
        rec = self.record
        if not rec:
            return Text("memory: waiting for a plan", style="dim")
        states = int(rec.get("states_bytes_per_gpu") or 0)
        budget = int(rec.get("budget_bytes") or 0)
        act = activation_bytes(rec) or 0
        fits = bool(rec.get("fits", states <= budget))
        offload = bool((rec.get("resolved_parallelism") or {}).get("cpu_offload"))
        width = max(10, self.size.width - 2)
        scale = max(budget, states + act, 1) * 1.05
        n_states = min(width, round(states / scale * width))
        n_act = min(width - n_states, round(act / scale * width))
        mark = min(width - 1, round(budget / scale * width))
        n_free = width - n_states - n_act
        out = Text()
        out.append("GPU ", style="bold")
        out.append(f"states {fmt_gb(states)}", style="bold green" if fits else "bold red")
        out.append(f" + activations {fmt_gb(act)} of budget {fmt_gb(budget)}\n")
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
            out.append(f"fits: {fmt_gb(budget - states)} of the budget left", style="green")
        else:
            out.append(f"does not fit: {fmt_gb(states - budget)} over the budget", style="red")
        if offload:
            host = rec.get("host_bytes_per_node")
            out.append(f"\nhost memory per node (cpu_offload): {fmt_gb(host)}")
        return out
