"""Terminal charts drawn with plotext and shown as plain text in a widget.

plotext 6 draws into one global figure, so charts are only ever built on the UI thread (in
`render`). They are built colorless: the widget's own text color then follows the theme, so
the chart reads the same in light and dark themes, and snapshots are stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

Series = tuple[str, Sequence[float], Sequence[float], str | None]  # label, xs, ys, marker


def render_chart(
    series: Sequence[Series],
    width: int,
    height: int,
    title: str,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """One line chart as text; each series draws lines unless it has a marker (points)."""
    import plotext as plt  # deferred: the app starts without paying for plotext

    fig = plt.figure
    fig.clear()
    plt.terminal.limit(False, False)
    fig.plot_size(max(width, 20), max(height, 6))
    for label, xs, ys, marker in series:
        if not xs:
            continue
        sig = fig.signal(list(xs), list(ys), marker=marker) if marker else fig.signal(xs, ys)
        sig = sig.label(label) if label else sig
        fig.draw(sig if marker else sig.lines())
    if x_ticks:
        fig.ruler("x").ticks(list(x_ticks))
    fig.title(title)
    return fig.build().string(colorless=True).rstrip("\n")


def throughput_points(sweep: Sequence[dict[str, Any]], stage: int) -> tuple[list, list, list]:
    """(gpu_counts, tokens/s, scaling efficiency) of one zero_stage from a throughput sweep."""
    rows = sorted((r for r in sweep if r.get("zero_stage") == stage), key=lambda r: r["gpu_count"])
    xs = [r["gpu_count"] for r in rows]
    tps = [float(r.get("tokens_per_s") or 0.0) for r in rows]
    eff = [float(r.get("scaling_efficiency") or 0.0) for r in rows]
    return xs, tps, eff


class ThroughputChart(Widget):
    """tokens/s and scaling efficiency against gpu_count for zero_stage 0, 2, 3; `X` = now."""

    sweep: reactive[tuple[dict[str, Any], ...]] = reactive((), layout=True)
    current: reactive[tuple[int, int] | None] = reactive(None)  # (gpu_count, zero_stage)

    def render(self) -> Text:
        if not self.sweep:
            return Text("throughput: waiting for a plan", style="dim")
        width, half = self.size.width, max(8, self.size.height // 2)
        charts = []
        for metric, title in (("tps", "tokens/s vs gpu_count"), ("eff", "scaling efficiency")):
            series: list[Series] = []
            for stage in (0, 2, 3):
                xs, tps, eff = throughput_points(self.sweep, stage)
                series.append((f"zero {stage}", xs, tps if metric == "tps" else eff, None))
            if self.current is not None:
                gpus, stage = self.current
                xs, tps, eff = throughput_points(self.sweep, stage)
                if gpus in xs:
                    y = (tps if metric == "tps" else eff)[xs.index(gpus)]
                    series.append(("now", [gpus], [y], "X"))
            ticks = sorted({r["gpu_count"] for r in self.sweep})
            charts.append(render_chart(series, width, half, title, ticks))
        return Text("\n".join(charts))


class LossChart(Widget):
    """Training loss against optimizer step, redrawn as metric lines arrive."""

    points: reactive[tuple[tuple[int, float], ...]] = reactive(())

    def render(self) -> Text:
        if not self.points:
            return Text("loss: no step reported yet", style="dim")
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        return Text(render_chart([("", xs, ys, None)], self.size.width, self.size.height, "loss"))
