"""Repaints that lay the screen out again only when a widget's height changes.

A Textual refresh with `layout=True` re-arranges the whole screen: the plan editor's form
grid (about 100 widgets) and every pane beside it, which was most of a keystroke's cost
(docs/app.md, Keystroke latency). Most keystrokes change what a widget says, not how many
lines it takes, so these helpers compare the height the new content needs at the widget's
current width with the height it has and ask for a layout only when they differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.visual import visualize
from textual.widget import Widget
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


def content_height(widget: Widget, content: object, width: int) -> int:
    """Lines `content` takes in `widget` at `width` cells (as Textual's auto height counts)."""
    # A widget's styles answer every rule lookup get_height makes (Textual passes them too;
    # its annotation names the TypedDict they are read through).
    styles = cast("RulesMap", widget.styles)
    return visualize(widget, content, markup=False).get_height(styles, width)


def show(static: Static, content: str | Text) -> None:
    """Update `static` only when its content changes, and lay out only when its height does."""
    old = static.content
    if old == content:
        return
    width = static.content_size.width
    # Not laid out yet (width 0), or an empty side (its height rules may differ): lay out.
    layout = width <= 0 or not old or not content
    if not layout:
        layout = content_height(static, old, width) != content_height(static, content, width)
    static.update(content, layout=layout)


def refresh_steady(widget: Widget) -> None:
    """Repaint `widget` (its `render()` changed); lay out only when its height changed.

    The height last laid out is remembered with the width it was counted at: a resize in
    between lays out anyway (Textual does it), and the next refresh counts afresh.
    """
    width = widget.content_size.width
    key = (width, content_height(widget, widget.render(), width) if width > 0 else 0)
    layout = width <= 0 or key != getattr(widget, "_steady_key", None)
    widget._steady_key = key  # type: ignore[attr-defined]
    widget.refresh(layout=layout)
