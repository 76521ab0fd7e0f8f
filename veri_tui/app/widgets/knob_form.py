"""The plan editor's form: one row per key (label, editor, the key's errors beneath it).

The form only collects raw values as typed and shows the errors it is given; parsing and
checking belong to `veri_tui.plan.job_from_fields` / `validate`. Empty inputs, `auto` and
switches left at their default are not sent, so the core applies its own defaults and
"not set" stays distinguishable from "set to the default" (the sharding-knob refusals care).
An empty input shows a short hint (its default or unit); the field in focus has its full
description in the help line docked under the form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual import events, on
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.geometry import Size
from textual.message import Message
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, Switch

from veri_tui.app.widgets.knob_fields import FIELDS, FieldSpec

KEYS = frozenset(spec.key for spec in FIELDS)
#: The form's values as typed: text, a choice, or a switch's bool (`job_from_fields` reads them).
FormValues = dict[str, str | bool]
# The GPU select's last choice: any GPU by its memory, `custom-<N>GB` as `plan --gpu` takes
# it; the N is typed in the row under the select, shown only while this choice is made.
CUSTOM = "custom"


def custom_gb(gpu: object) -> str | None:
    """The N of a `custom-<N>GB` GPU name (None for a catalog name)."""
    text = str(gpu or "")
    return text.removeprefix("custom-").removesuffix("GB") if text.startswith("custom-") else None


class KnobInput(Input):
    """An Input whose typing repaints it without laying the screen out again.

    Input sets its virtual size (the text's width, for horizontal scrolling) on every
    change, and Widget's `virtual_size` asks for a layout of the whole screen when it
    changes: with the form's ~100 widgets that was most of a keystroke's latency. A knob's
    input has a fixed size (its grid cell) and no scrollbars, and Input scrolls to its
    cursor from `virtual_size` itself, so no layout is needed for it.
    """

    virtual_size = Reactive(Size(0, 0), layout=False)

    async def _on_key(self, event: events.Key) -> None:
        """Run this input's own editing keys (backspace, arrows, home, ...) here, in the
        order the keys came. Input inserts printable keys in `_on_key` but leaves bound keys
        to bubble up to the app, which runs the binding a few message queues later: a
        digit typed right after a Backspace could land first (Textual #6605), and keys
        bunch up over a websocket or an ssh tunnel. Priority bindings have run before
        the key reached this widget, and the focused widget's bindings are the first the
        app would try, so what runs is what the app would run, only sooner."""
        if not event.is_printable:
            for binding in self._bindings.key_to_bindings.get(event.key, ()):
                if not binding.priority and await self.app.run_action(binding.action, self):
                    self._restart_blink()
                    event.stop()
                    event.prevent_default()
                    return
        await super()._on_key(event)

    def watch_value(self) -> None:
        """Hand typed text to the form at once, not through Input.Changed: that message is
        handled after the next frame (which then shows only the typed digit), so the new
        plan line would wait one or two frame intervals more."""
        for node in self.ancestors:
            if isinstance(node, KnobForm):
                node.notify_change()
                return


class FieldError(Static):
    """A field's error row: spans the grid's two columns, so it wraps at the grid's width.

    Textual's grid measures an `auto` row at one column's width even for a cell that spans
    two (textual/layouts/grid.py): with the label column's 19 cells of left padding that
    left 0 or 1 cell for the text, so `must be at least 1 (got -1)` took 26 rows and a
    79-character parse error 79, pushing every later field off screen. The container passed
    in is the grid's own size, the row's real width.
    """

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The text's height wrapped at the grid's width (less this row's padding)."""
        return super().get_content_height(
            container, viewport, max(1, container.width - self.styles.gutter.width)
        )


def _named(key: str, message: str) -> str:
    """A value's refusal as a sentence about its field: `micro_batch_size must be a whole
    number (got '8x')` (the planning core says `must be ...`, the CLI puts `key:` before it)."""
    return f"{key} {message}" if message.startswith("must ") else message


class KnobForm(VerticalScroll):
    """Every job field and knob; calls `on_change()` after an edit that changed `values()`."""

    DEFAULT_CSS = """
    KnobForm #knob-help {
        dock: bottom;
        height: auto;
        max-height: 4;
        padding: 0 1;
        background: $boost;
        color: $text-muted;
        display: none;
    }
    """

    def __init__(
        self,
        gpu_names: list[str],
        initial: dict[str, Any],
        on_change: Callable[[], None],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._on_change = on_change
        self._notified: FormValues | None = None  # the values on_change last saw
        self._quiet = False  # set_values: one on_change at the end, not one per field
        self._gpu_names = gpu_names
        self._initial = initial
        self._shown_errors: dict[str, str] = {}
        self._parts: dict[str, Widget] = {}

    def compose(self) -> ComposeResult:
        # One grid (label | editor, the error row spanning both) instead of a container per
        # field: a third fewer widgets, which keeps layout after each keystroke fast.
        method = str(self._initial.get("method") or "sft_text")
        with Grid(id="knob-grid"):
            for spec in FIELDS:
                if spec.section:
                    yield Static(spec.section, classes="form-section", markup=False)
                label = Label(spec.label, classes="field-label", id=f"label-{spec.key}")
                editor = self._editor(spec)
                # Method-specific keys (max_length, beta, ...) start hidden for other methods.
                label.display = editor.display = not spec.methods or method in spec.methods
                yield label
                yield editor
                if spec.key == "gpu":
                    yield from self._custom_gpu_row()
                yield FieldError("", classes="field-error", id=f"err-{spec.key}", markup=False)
        yield Static("", id="knob-help", markup=False)

    def _custom_gpu_row(self) -> ComposeResult:
        """`memory (GB)` under the GPU select, shown for its `custom` choice."""
        gb = custom_gb(self._initial.get("gpu"))
        label = Label("  memory (GB)", classes="field-label", id="label-gpu_custom")
        editor = KnobInput(gb or "", placeholder="e.g. 48", id="knob-gpu_custom")
        editor.tooltip = "the GPU's memory in decimal GB: custom-<N>GB, as `plan --gpu` takes"
        label.display = editor.display = gb is not None
        yield label
        yield editor

    def _editor(self, spec: FieldSpec) -> Input | Select[str] | Switch:
        wid = f"knob-{spec.key}"
        value = self._initial.get(spec.key, spec.default)
        if spec.widget == "switch":
            return Switch(value=bool(value), id=wid, tooltip=spec.help)
        if spec.widget == "select":
            options = spec.options or (*self._gpu_names, CUSTOM)
            if spec.key == "gpu" and custom_gb(value) is not None:
                value = CUSTOM
            value = str(value) if value is not None and str(value) in options else options[0]
            return Select(
                [(o if o != CUSTOM else "custom-<N>GB", o) for o in options],
                value=value,
                allow_blank=False,
                id=wid,
                tooltip=spec.help,
            )
        initial = self._initial.get(spec.key)  # unset: empty, so the core's default applies
        text = "" if initial is None else str(initial)
        return KnobInput(text, placeholder=spec.placeholder, id=wid, tooltip=spec.help)

    def values(self) -> FormValues:
        """The keys the user set, as raw form values (strings, or bools for switches)."""
        out: FormValues = {}
        for spec in FIELDS:
            if not self._part("label", spec.key).display:
                continue
            widget = self._part("knob", spec.key)
            if isinstance(widget, Switch):
                if widget.value != spec.default:
                    out[spec.key] = widget.value
            elif isinstance(widget, Select):
                value = str(widget.value)  # a choice always (allow_blank is off)
                if value == CUSTOM and spec.key == "gpu":
                    gb = self._part("knob", "gpu_custom")
                    assert isinstance(gb, Input)
                    value = f"custom-{gb.value.strip().removesuffix('GB')}GB"
                if spec.key in ("method", "gpu") or value != spec.default:
                    out[spec.key] = value
            elif isinstance(widget, Input) and widget.value.strip():
                out[spec.key] = widget.value.strip()
        return out

    def set_values(self, values: dict[str, Any]) -> None:
        """Put values into their editors (pin, suggestions); one on_change afterwards."""
        self._quiet = True
        with self.prevent(Input.Changed, Select.Changed, Switch.Changed):
            for key, value in values.items():
                if key not in KEYS:
                    continue
                widget = self._part("knob", key)
                if isinstance(widget, Switch):
                    widget.value = bool(value)
                elif isinstance(widget, Select):
                    gb = custom_gb(value) if key == "gpu" else None
                    memory = self._part("knob", "gpu_custom")
                    if gb is not None and isinstance(memory, Input):
                        memory.value = gb
                    widget.value = CUSTOM if gb is not None else str(value)
                    if key == "gpu":
                        self._show_custom(gb is not None)
                elif isinstance(widget, Input):
                    widget.value = "" if value is None else str(value)
        self._quiet = False
        self._show_for_method(str(self.values().get("method", "sft_text")))
        self.notify_change()

    def notify_change(self) -> None:
        """Call on_change if `values()` differ from what it last saw (typing calls this
        for each key, and the Input.Changed that follows finds nothing new)."""
        if self._quiet:
            return
        values = self.values()
        if values != self._notified:
            self._notified = values
            self._on_change()

    def _part(self, prefix: str, key: str) -> Widget:
        """The label, editor or error row of `key`, looked up once: a query by id walks the
        whole form, and every keystroke reads every field."""
        name = f"{prefix}-{key}"
        widget = self._parts.get(name)
        if widget is None:
            widget = self._parts[name] = self.query_one(f"#{name}")
        return widget

    def set_errors(self, errors: dict[str, list[str]]) -> list[str]:
        """Show each key's messages under its field; returns the keys no visible field shows."""
        for spec in FIELDS:
            box = self._part("err", spec.key)
            assert isinstance(box, Static)
            text = "\n".join(_named(spec.key, m) for m in errors.get(spec.key, []))
            if text != self._shown_errors.get(spec.key, ""):  # untouched rows: no relayout
                box.update(text)
                box.set_class(bool(text), "-shown")
                self._shown_errors[spec.key] = text
        shown = {s.key for s in FIELDS if self._part("label", s.key).display}
        return [key for key in errors if key not in shown]

    def _show_custom(self, visible: bool) -> None:
        for prefix in ("label", "knob"):
            self._part(prefix, "gpu_custom").display = visible

    def _show_for_method(self, method: str) -> None:
        for spec in FIELDS:
            if spec.methods:
                visible = method in spec.methods
                for prefix in ("label", "knob"):
                    self._part(prefix, spec.key).display = visible

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Switch.Changed)
    def _changed(self, event: Message) -> None:
        event.stop()
        if isinstance(event, Select.Changed) and event.select.id == "knob-method":
            self._show_for_method(str(event.value))
        if isinstance(event, Select.Changed) and event.select.id == "knob-gpu":
            self._show_custom(event.value == CUSTOM)
        self.notify_change()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        """Show the focused field's full description in the help line."""
        key = (event.widget.id or "").removeprefix("knob-")
        spec = next((s for s in FIELDS if s.key == key), None)
        help_line = self.query_one("#knob-help", Static)
        if spec is not None:
            help_line.update(f"{spec.key}: {spec.help}")
        help_line.display = spec is not None

    def on_descendant_blur(self) -> None:
        self.query_one("#knob-help", Static).display = False
