"""Chat templates for counting `messages` rows: rendered as transformers renders them.

transformers compiles a template in jinja2's ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, its own `tojson` filter and the
`raise_exception` / `strftime_now` globals, and passes the special tokens by name. The same
here, less its `{% generation %}` extension (a template that uses it is refused with a line
saying so). jinja2 is imported only when a dataset has `messages` rows.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.rows import check_messages

if TYPE_CHECKING:  # jinja2 is imported only when a dataset has `messages` rows
    import jinja2

SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")  # fmt: skip


class ChatTemplate(NamedTuple):
    """A compiled template and the special tokens it is rendered with."""

    template: jinja2.Template
    specials: dict[str, str]

    @classmethod
    def load(cls, model_dir: Path, config: dict[str, Any], where: str) -> ChatTemplate:
        """The template transformers would use: chat_template.jinja, else the config's."""
        source = None
        jinja_file = model_dir / "chat_template.jinja"
        if jinja_file.is_file():
            source = jinja_file.read_text(encoding="utf-8")
        else:
            source = config.get("chat_template")
            if isinstance(source, list):  # named templates: transformers takes "default"
                named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
                source = named.get("default")
        if not isinstance(source, str):
            raise DataError(f"{where}: `messages` rows need a tokenizer with a chat template")
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise DataError("counting `messages` rows needs jinja2 (pip install jinja2)") from None

        def raise_exception(message: str) -> None:
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None,
                   separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                              separators=separators, sort_keys=sort_keys)  # fmt: skip

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            compiled = env.from_string(source)
        except jinja2.TemplateError as exc:
            raise DataError(f"{where}: the chat template does not compile ({exc})") from None
        specials = {}
        for key in SPECIAL_KEYS:
            value = config.get(key)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                specials[key] = value
        return cls(compiled, specials)

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool, where: str) -> str:
        """The conversation as text (no tokenization), as apply_chat_template(tokenize=False)."""
        try:
            return self.template.render(
                messages=messages, add_generation_prompt=generation_prompt, **self.specials
            )
        except Exception as exc:  # noqa: BLE001 - a template may raise anything
            raise DataError(f"{where}: the chat template failed ({exc})") from None


def chat_segments(template: ChatTemplate, msgs: Any, where: str) -> tuple[str, list[str]]:
    """The texts the trainer tokenizes for one `messages` row, checked as it checks them: the
    first (special tokens added) and the rest (veri_tui/trainer/data.py `_messages`)."""
    msgs = check_messages(msgs, where)
    texts: list[str] = []
    done = ""
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        prompt = template.render(msgs[:i], True, where)
        full = template.render(msgs[: i + 1], False, where)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise DataError(f"{where}: the chat template does not render turns as prefixes")
        texts += [prompt[len(done) :], full[len(prompt) :]]
        done = full
    return texts[0], texts[1:]
