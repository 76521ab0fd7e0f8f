"""A plan record (or the refusals of a job that cannot be planned) as one HTML block.

What `veri-tui plan` prints, laid out for a notebook cell: the header lines, the plan line,
a memory bar by part (each state component of `resolved_parallelism.memory_estimate`, the
activations, the budget marked), throughput, the job's time and cost, warnings and
suggestions, and refusals in red. Every string from the record is escaped (`html.escape`):
model paths and dataset names are the user's text. Plain HTML and inline styles, so it
renders in JupyterLab, VS Code and nbconvert alike without ipywidgets or any JavaScript.
Standard library only, so it lives in the planning core: `PlanRecord._repr_html_` and the
notebook side (`veri_tui.notebook.plan_view`) both import it from here.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veri_tui.plan.record import PlanRecord

RED, GREEN, AMBER, GREY = "#c62828", "#2e7d32", "#b26a00", "#777"
PART_COLORS = {
    "weights": "#1565c0",
    "gradients": "#6a1b9a",
    "optimizer": "#00838f",
    "frozen_base": "#546e7a",
    "compute_copy": "#8d6e63",
    "reference": "#ad1457",
    "in_flight": "#283593",
    "other": "#9e9e9e",
    "activations": "#f9a825",
}
BOX = "font-family: ui-monospace, Menlo, monospace; font-size: 13px; line-height: 1.45"


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB"


def _line(text: str, style: str = "") -> str:
    return f"<div style='{style}'>{escape(text)}</div>"


def memory_parts(record: PlanRecord) -> list[tuple[str, int]]:
    """(part, bytes per GPU): the state components as the core counted them, then the
    activations. A remainder the components do not name is shown as `other`."""
    estimate = record.resolved_parallelism.get("memory_estimate") or {}
    parts = [(k, int(v)) for k, v in (estimate.get("components") or {}).items() if v]
    rest = record.states_bytes_per_gpu - sum(v for _, v in parts)
    if rest > 0:
        parts.append(("other", rest))
    act = int(record.activations.get("bytes_per_gpu") or 0)
    if act:
        parts.append(("activations", act))
    return parts


def memory_bar(record: PlanRecord) -> str:
    """A bar of the parts against the budget (a dark line marks it), with a legend."""
    parts = memory_parts(record)
    budget = record.budget_bytes
    scale = max(budget, sum(v for _, v in parts), 1) * 1.05
    segments = "".join(
        f"<div title='{escape(name)}: {_gb(v)}' style='width:{100 * v / scale:.3f}%;"
        f"background:{PART_COLORS.get(name, '#9e9e9e')}'></div>"
        for name, v in parts
    )
    mark = f"<div style='position:absolute;left:{100 * budget / scale:.3f}%;top:-3px;"
    mark += "bottom:-3px;width:2px;background:#222' title='budget'></div>"
    bar = (
        "<div style='position:relative;display:flex;height:14px;background:#eee;"
        f"border:1px solid #bbb;margin:4px 0'>{segments}{mark}</div>"
    )
    legend = " &nbsp; ".join(
        f"<span style='color:{PART_COLORS.get(name, '#9e9e9e')}'>&#9632;</span> "
        f"{escape(name)} {_gb(v)}"
        for name, v in parts
    )
    fits = record.fits
    verdict = (
        f"fits: {_gb(budget - record.states_bytes_per_gpu)} of the budget left"
        if fits
        else f"does not fit: {_gb(record.states_bytes_per_gpu - budget)} over the budget"
    )
    head = f"memory per GPU: states {_gb(record.states_bytes_per_gpu)} of budget {_gb(budget)}"
    return (
        _line(head, "font-weight:bold")
        + bar
        + f"<div style='font-size:12px'>{legend}</div>"
        + _line(verdict, f"color:{GREEN if fits else RED}")
    )


def throughput_text(tp: dict[str, Any]) -> str:
    """The estimate's one line (what `veri-tui plan` prints after the plan line)."""
    if not tp.get("known"):
        return f"throughput: not estimated ({tp.get('reason', 'unknown')})"
    return (
        f"throughput: ~{tp['tokens_per_s']:,.0f} tokens/s, step {tp['step_time_s']:.2f} s, "
        f"scaling efficiency {tp['scaling_efficiency']:.0%}"
        + (", communication-bound" if tp.get("communication_bound") else "")
    )


def record_html(record: PlanRecord) -> str:
    """The whole record as one block (PlanRecord._repr_html_ returns this)."""
    from veri_tui.plan.cost import cost_line
    from veri_tui.plan.suggest import ways_out_title

    color = GREEN if record.fits else RED
    out = [_line(line, f"color:{GREY}") for line in record.header_lines]
    out.append(_line(record.plan_line, f"font-weight:bold;color:{color}"))
    out.append(memory_bar(record))
    out.append(_line(throughput_text(record.throughput)))
    out.append(_line(cost_line(record.cost)))
    out += [_line(f"warning: {w}", f"color:{AMBER}") for w in record.warnings]
    if record.suggestions:
        title = f"{ways_out_title(record.suggestions)}:"
        out.append(_line(title, f"color:{RED};font-weight:bold"))
        numbered = enumerate(record.suggestions, start=1)
        out += [_line(f"{i}. {s.text}", f"color:{RED}") for i, s in numbered]
    return f"<div class='veri-plan' style='{BOX}'>{''.join(out)}</div>"


def refusals_html(lines: list[str]) -> str:
    """A job the core refused: each `key: message` in red (as the CLI's error lines)."""
    body = "".join(_line(f"error: {line}", f"color:{RED}") for line in lines)
    n = len(lines)
    head = _line(f"plan refused: {n} error{'s' * (n != 1)}", f"color:{RED};font-weight:bold")
    return f"<div class='veri-plan' style='{BOX}'>{head}{body}</div>"
