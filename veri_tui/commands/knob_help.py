"""The knob list of `veri-tui plan --help` (and launch's), written from the knob schema.

Each knob: its name, what it takes (the type, a Literal's values, its bounds and unit), its
default, and its description, in the schema's order (veri_tui/jobfolder/knobs/fields.py). Built only
when help is asked: reading the schema's types is no cost a plain `plan` should pay.
"""

from __future__ import annotations

import textwrap
import types
import typing
from typing import Any, Literal

from veri_tui.jobfolder.knobs import Hyperparameters, Knob, table

_NAMES = {int: "integer", float: "number", bool: "true|false", str: "text"}


def _takes(tp: Any) -> str:
    """What a value of type `tp` is, in words: `integer`, `none|selective|full`, ..."""
    if typing.get_origin(tp) is Literal:
        return "|".join(str(v) for v in typing.get_args(tp))
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return "|".join(_takes(a) for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is list:
        return "list of " + _takes(typing.get_args(tp)[0])
    return _NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def takes(knob: Knob) -> str:
    """The knob's type with its bounds and unit: `integer >= 1`, `number > 0 (seconds)`."""
    signs = ((">=", knob.ge), (">", knob.gt), ("<=", knob.le), ("<", knob.lt))
    bounds = ", ".join(f"{sign} {bound:g}" for sign, bound in signs if bound is not None)
    text = f"{_takes(knob.type)} {bounds}" if bounds else _takes(knob.type)
    return f"{text} ({knob.unit})" if knob.unit else text


def _default(knob: Knob) -> str:
    if knob.default is None:
        return "unset"
    if isinstance(knob.default, bool):
        return str(knob.default).lower()
    return str(knob.default)


def epilog(width: int) -> str:
    """The knobs section, wrapped to `width` columns."""
    lines = ["knobs (--set KEY=VALUE, or under [method] in a veri.toml; docs/planning.md):"]
    for k in table(Hyperparameters):
        alias = f", alias {k.alias}" if k.alias else ""
        lines.append(f"  {k.name} = {takes(k)}; default {_default(k)}{alias}")
        lines += textwrap.wrap(
            k.description, max(width, 40), initial_indent=" " * 6, subsequent_indent=" " * 6
        )
    return "\n".join(lines)
