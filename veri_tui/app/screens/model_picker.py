"""The model picker: bundled assets, the local HF cache, recently used models, a path or a
Hub id. The highlighted model's parameter count, architecture, dtypes and size on disk are
read in a thread worker (local headers, or Hub metadata when online).

The path field has the focus, so typing goes there; up and down move the list's highlight
from it, and Enter chooses what was typed, or the highlighted model when nothing was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from veri_tui.app.messages import ModelInfoRead, ModelsListed
from veri_tui.app.widgets.memory_bar import fmt_gb
from veri_tui.errors import VeriError

if TYPE_CHECKING:
    from veri_tui.plan import ModelInfo


def describe(info: ModelInfo) -> str:
    """The picker's detail lines for a ModelInfo."""
    arch = info.model_type or "?"
    if info.path:
        try:
            cfg = json.loads((Path(info.path) / "config.json").read_text("utf-8"))
            arch = ", ".join(cfg.get("architectures") or []) or arch
        except (OSError, ValueError):
            pass
        size = sum(
            (Path(info.path) / f).stat().st_size
            for f in info.files
            if (Path(info.path) / f).is_file()
        )
        where = f"{info.path} ({fmt_gb(size)} on disk)"
    else:
        where = "Hub metadata only (not downloaded)"
    dtypes = ", ".join(f"{d} {n:,}" for d, n in sorted(info.dtypes.items())) or "?"
    moe = ""
    if info.moe_layer_count:  # a mixture of experts: what a token uses
        moe = (
            f"experts {info.experts} routed, {info.experts_per_token or '?'} per token, "
            f"{info.shared_experts} shared; active {info.active_parameter_count:,} "
            f"({info.active_parameter_count / 1e9:.2f}B) per token\n"
        )
    return (
        f"parameters {info.parameter_count:,} ({info.parameter_count / 1e9:.2f}B)\n{moe}"
        f"architecture {arch}, {info.layer_count} layers, hidden {info.hidden_size}\n"
        f"dtypes {dtypes}\n{where}"
    )


class ModelPickerScreen(ModalScreen[str | None]):
    """Dismisses with the chosen model (a path or Hub id), or None."""

    BINDINGS = [
        Binding("escape", "dismiss_none", "Cancel"),
        # The path field does not use up/down: from it they move the list's highlight (the
        # list, when it has the focus, handles them itself first).
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("down", "move(1)", "Next", show=False),
    ]

    def __init__(self, current: str | None) -> None:
        super().__init__()
        self.current = current
        self._highlighted: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="picker"):
            yield Static(
                "Pick a model: type a path or Hub id, or pick with up/down; Enter chooses, "
                "Esc cancels",
                classes="dialog-title",
                markup=False,
            )
            yield Input(placeholder="a folder path or a Hub id (org/name)", id="model-input")
            yield OptionList(id="model-list")
            yield Static("", id="model-details", markup=False)

    def on_mount(self) -> None:
        self.list_models(self.app.recent_models())  # type: ignore[attr-defined]
        self.query_one("#model-input", Input).focus()

    def action_move(self, delta: int) -> None:
        olist = self.query_one(OptionList)
        if delta < 0:
            olist.action_cursor_up()
        else:
            olist.action_cursor_down()

    @work(thread=True, group="list-models")
    def list_models(self, recent: list[str]) -> None:
        """The bundled models (the tiny dense one, the tiny mixture of experts), recent
        picks, and the complete snapshots in the HF cache."""
        from veri_tui.bundled import bundled_moe
        from veri_tui.plan.model_sources import bundled_tiny_model, cached_snapshot, hub_cache_dir

        rows = [("bundled", str(bundled_tiny_model()), "tiny-model"),
                ("bundled", str(bundled_moe()), "tiny-moe (mixture of experts)")]  # fmt: skip
        rows += [("recent", m, "") for m in recent]
        cache = hub_cache_dir()
        if cache.is_dir():
            for repo in sorted(cache.glob("models--*")):
                repo_id = repo.name[len("models--") :].replace("--", "/")
                if cached_snapshot(repo_id) is not None:
                    rows.append(("cache", repo_id, ""))
        self.post_message(ModelsListed(rows))

    def on_models_listed(self, message: ModelsListed) -> None:
        olist = self.query_one(OptionList)
        olist.clear_options()
        seen: set[str] = set()
        for source, name, label in message.rows:
            if name in seen:
                continue
            seen.add(name)
            olist.add_option(Option(f"{source:8} {label or name}", id=name))
        if olist.option_count:
            olist.highlighted = 0

    @on(OptionList.OptionHighlighted)
    def _highlighted_option(self, event: OptionList.OptionHighlighted) -> None:
        self._show(str(event.option.id))

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(str(event.option.id))

    @on(Input.Submitted, "#model-input")
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self._show(event.value.strip(), choose=True)
            return
        olist = self.query_one(OptionList)  # nothing typed: Enter takes the highlighted one
        if olist.highlighted is not None:
            self.dismiss(str(olist.get_option_at_index(olist.highlighted).id))

    def _show(self, model: str, choose: bool = False) -> None:
        self._highlighted = model
        self._choose_when_read = choose
        self.query_one("#model-details", Static).update(f"reading {model}...")
        self.read_info(model)

    @work(thread=True, exclusive=True, group="picker-info")
    def read_info(self, model: str) -> None:
        from veri_tui.plan import read_model_info

        try:
            info = read_model_info(model)
            self.post_message(ModelInfoRead(model, info))
        except VeriError as exc:
            self.post_message(ModelInfoRead(model, error=str(exc)))
        except OSError as exc:
            self.post_message(ModelInfoRead(model, error=f"{model}: {exc}"))

    def on_model_info_read(self, message: ModelInfoRead) -> None:
        message.stop()  # the editor below listens for its own reads, not the picker's
        if message.model != self._highlighted:
            return
        details = self.query_one("#model-details", Static)
        details.update(message.error or (describe(message.info) if message.info else ""))
        details.set_class(bool(message.error), "-error")
        if self._choose_when_read and not message.error:
            self.dismiss(message.model)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
