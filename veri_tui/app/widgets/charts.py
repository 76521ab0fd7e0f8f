"""Terminal charts drawn with plotext and shown as plain text in a widget.

plotext 6 draws into one global figure, so charts are only ever built on the UI thread (in
`render`). The "simple" plotext theme sets foreground colors only, so the app theme's
background shows through in light and dark themes; series are also told apart by their
marker characters, which keeps them distinct without color.

Importing plotext takes about a quarter of a second, so it is imported in a thread worker
the first time a chart has data; until then the chart says it is drawing, and the plan
line and memory bar do not wait for it.
"""

from __future__ import annotations

import importlib
import sys
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
) -> Text:
    """One line chart; a series with a marker character draws its lines in that character
    (so series stay apart without color), a marker on a single point draws just the point."""
    import plotext as plt  # deferred: the app starts without paying for plotext

    fig = plt.figure
    fig.clear()
    plt.terminal.limit(False, False)
    fig.plot_size(max(width, 20), max(height, 6))
    fig.theme("simple")  # foreground colors only: the theme's background shows through
    for label, xs, ys, marker in series:
        if not xs:
            continue
        sig = fig.signal(list(xs), list(ys), marker=marker) if marker else fig.signal(xs, ys)
        sig = sig.label(label) if label else sig
        fig.draw(sig.lines() if len(xs) > 1 else sig)
    if x_ticks:
        fig.ruler("x").ticks(list(x_ticks))
    fig.legend(False)  # plotext's box hides data at this size; callers print a key line
    fig.title(title)
    return Text.from_ansi(fig.build().string().rstrip("\n"))


class ChartWidget(Widget):
    """A widget drawn by plotext: shows a placeholder while plotext is being imported."""

    _importing = False

    def plotext_ready(self) -> bool:
        """True once plotext is imported; otherwise start importing it off the UI thread."""
        if "plotext" in sys.modules:
            return True
        # One import worker per widget, started once: every render until it ends lands here,
        # and an exclusive worker per render would cancel the one before (a cancelled
        # worker's thread still imports, but waiting for it raises WorkerCancelled).
        if not self._importing:
            self._importing = True
            self.run_worker(self._import_plotext, thread=True, group="plotext")
        return False

    def _import_plotext(self) -> None:
        importlib.import_module("plotext")
        self.app.call_from_thread(self.refresh)


def throughput_points(
    sweep: Sequence[dict[str, Any]], stage: int
) -> tuple[list[int], list[float], list[float]]:
    """(gpu_counts, tokens/s, scaling efficiency) of one zero_stage from a throughput sweep."""
    # Rows of a GPU without a known peak carry `known: False` and no numbers: skip them.
    mine = (r for r in sweep if r.get("known", True) and r.get("zero_stage") == stage)
    rows = sorted(mine, key=lambda r: r["gpu_count"])
    xs = [r["gpu_count"] for r in rows]
    tps = [float(r.get("tokens_per_s") or 0.0) for r in rows]
    eff = [float(r.get("scaling_efficiency") or 0.0) for r in rows]
    return xs, tps, eff


class ThroughputChart(ChartWidget):
    """tokens/s and scaling efficiency against gpu_count for zero_stage 0, 2, 3; `X` = now."""

    # No layout on a new sweep: the chart's height is fixed (veri.tcss), only its lines change.
    sweep: reactive[tuple[dict[str, Any], ...]] = reactive(())
    current: reactive[tuple[int, int] | None] = reactive(None)  # (gpu_count, zero_stage)
    #: Why there is no sweep: an estimate on its way, or none until the form is fixed.
    without: reactive[str] = reactive("no estimate yet")

    def render(self) -> Text:
        if not self.sweep:
            return Text(f"throughput chart: {self.without}", style="dim")
        if not self.plotext_ready():
            return Text("throughput chart: drawing...", style="dim")
        key = (self.sweep, self.current, self.size)
        if key != self._cache_key:  # plotext builds take ~15 ms: only when something changed
            self._cache_key, self._cache = key, self._build()
        return self._cache

    def _build(self) -> Text:
        skipped = [r for r in self.sweep if r.get("skipped")]
        width, half = self.size.width, max(8, (self.size.height - 1 - bool(skipped)) // 2)
        ticks = sorted({r["gpu_count"] for r in self.sweep if "gpu_count" in r})
        out = Text("lines: 0/2/3 = zero_stage 0/2/3", style="bold")
        if self.current is not None:
            from veri_tui.plan.gpus import gpus_text  # loaded by now: there is a plan

            out.append(f"   X = this plan ({gpus_text(self.current[0])}, zero_stage "
                       f"{self.current[1]})")  # fmt: skip
        if skipped:
            # The sweep names the gpu_counts this job cannot run at (a pinned gbs that does
            # not split, a single-GPU-only knob): say so instead of leaving a silent gap.
            counts = ", ".join(str(r["gpu_count"]) for r in skipped)
            noun = "GPU" if counts == "1" else "GPUs"
            reasons = "; ".join(dict.fromkeys(r["reason"] for r in skipped))
            out.append(f"\nnot drawn at {counts} {noun}: {reasons}", style="dim")
        for pick, title in ((1, "tokens/s vs gpu_count"), (2, "scaling efficiency vs gpu_count")):
            series: list[Series] = []
            for stage in (0, 2, 3):
                xs, *ys = throughput_points(self.sweep, stage)
                series.append((f"zero {stage}", xs, ys[pick - 1], str(stage)))
            if self.current is not None:
                gpus, stage = self.current
                xs, *ys = throughput_points(self.sweep, stage)
                if gpus in xs:
                    series.append(("now", [gpus], [ys[pick - 1][xs.index(gpus)]], "X"))
            out.append("\n")
            out.append_text(render_chart(series, width, half, title, ticks))
        return out

    _cache_key: object = None
    _cache: Text = Text()


def step_ticks(steps: Sequence[int]) -> list[int]:
    """Whole steps for the x axis: at most ~6 ticks, always the first and the last step."""
    every = max(1, -(-(steps[-1] - steps[0]) // 5))
    return sorted({*range(steps[0], steps[-1], every), steps[-1]})


def side_by_side(left: Text, right: Text, gap: int = 2) -> Text:
    """Two multi-line texts as columns: ``left`` padded to its widest line, then ``right``."""
    lefts, rights = left.split("\n"), right.split("\n")
    width = max((line.cell_len for line in lefts), default=0)
    out = Text()
    for i in range(max(len(lefts), len(rights))):
        line = lefts[i] if i < len(lefts) else Text()
        out.append_text(line)
        if i < len(rights):
            out.append(" " * (width - line.cell_len + gap))
            out.append_text(rights[i])
        if i + 1 < max(len(lefts), len(rights)):
            out.append("\n")
    return out


StepPoints = tuple[tuple[int, float], ...]


class LossChart(ChartWidget):
    """Training loss against optimizer step, redrawn as metric lines arrive; for DPO (metric
    lines with TRL's `rewards/margins`) the reward margin is drawn beside it; eval_loss
    (metric lines that carry it) is a second line in the loss chart, marked E."""

    points: reactive[StepPoints] = reactive(())
    margins: reactive[StepPoints] = reactive(())
    evals: reactive[StepPoints] = reactive(())

    def render(self) -> Text:
        if not self.points:
            return Text("loss: no step reported yet", style="dim")
        if not self.plotext_ready():
            return Text("loss chart: drawing...", style="dim")
        key = (self.points, self.margins, self.evals, self.size)
        if key != self._cache_key:  # plotext builds take ~15 ms: only when something changed
            self._cache_key, self._cache = key, self._build()
        return self._cache

    def _build(self) -> Text:
        width, height = self.size.width, self.size.height
        charts = [(self.points, "loss vs step" + (" (E: eval_loss)" if self.evals else ""))]
        if self.margins:
            charts.append((self.margins, "DPO reward margin vs step"))
        gap = 2
        each = (width - gap * (len(charts) - 1)) // len(charts)
        built = []
        for points, title in charts:
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            series: list[Series] = [("", xs, ys, None)]
            if points is self.points and self.evals:
                series.append(("", [p[0] for p in self.evals], [p[1] for p in self.evals], "E"))
            built.append(render_chart(series, each, height, title, step_ticks(xs)))
        return built[0] if len(built) == 1 else side_by_side(built[0], built[1], gap)

    _cache_key: object = None
    _cache: Text = Text()
