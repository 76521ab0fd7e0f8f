"""One knob's value checked as pydantic would: its exact result and its exact message.

A value that already has the knob's type (an int for an int, one of a Literal's values, ...)
and keeps its bounds is taken as is, with no pydantic at all: that is every value a
veri.toml or a typed `--set` gives, so `veri-tui plan` builds no pydantic schema. Anything
else (text from a form, a bool for a number, a value out of bounds) goes to pydantic's
TypeAdapter over the knob's type and bounds, built for that knob on first use: what it
accepts, and how, are pydantic's own; its refusal is said in plain words from the error's
type (`must be a whole number`, not "Input should be a valid integer, unable to parse string
as an integer"), pydantic's text only for a type not listed here.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from typing import Any, Literal

from veri_tui.jobfolder.knobs import Knob

_NO = object()  # "the fast path does not decide"


class KnobValueError(ValueError):
    """A knob's value refused: pydantic's message, the input it names and its place
    (a list item's index)."""

    def __init__(self, msg: str, value: Any, loc: tuple[Any, ...] = ()) -> None:
        super().__init__(msg)
        self.msg, self.input, self.loc = msg, value, loc


def _exact(tp: Any, value: Any) -> Any:
    """`value` if it already has type `tp` (the value pydantic would return), else _NO."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            out = _exact(member, value)
            if out is not _NO:
                return out
        return _NO
    if origin is Literal:
        same = any(value == v and type(value) is type(v) for v in typing.get_args(tp))
        return value if same else _NO
    if origin is list:
        (item,) = typing.get_args(tp)
        if type(value) is list and all(_exact(item, v) is not _NO for v in value):
            return list(value)
        return _NO
    if tp is type(None):
        return None if value is None else _NO
    if tp is float and type(value) in (int, float):
        return float(value)
    return value if type(value) is tp else _NO


def _in_bounds(knob: Knob, value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    if knob.finite and not math.isfinite(value):
        return False
    return not (
        (knob.ge is not None and not value >= knob.ge)
        or (knob.gt is not None and not value > knob.gt)
        or (knob.le is not None and not value <= knob.le)
        or (knob.lt is not None and not value < knob.lt)
    )


#: What a value must be, by pydantic's error type (its ctx filled in).
_MUST_BE = {
    "int_parsing": "a whole number", "int_type": "a whole number",
    "int_from_float": "a whole number", "float_parsing": "a number", "float_type": "a number",
    "finite_number": "a finite number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "text", "list_type": "a list",
    "dict_type": "a table",
    "greater_than_equal": "at least {ge}", "greater_than": "above {gt}",
    "less_than_equal": "at most {le}", "less_than": "below {lt}",
}  # fmt: skip


def _must_be(err: Any) -> str | None:
    kind, ctx = err.get("type"), err.get("ctx") or {}
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        return f"one of {expected}" if " or " in expected else expected
    words = _MUST_BE.get(kind)
    if words is None:
        return None
    return words.format(**{k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()})


def plain(errors: list[Any]) -> str:
    """pydantic's refusal of one value in plain words: `must be a whole number`, `must be at
    least 1`, `must be 'auto', or a whole number` (a union: what each member takes); pydantic's
    own message when a type is not one `_MUST_BE` knows."""
    words: list[str] = []
    for err in errors:
        said = _must_be(err)
        if said is None:
            return str(errors[0]["msg"])
        if said not in words:
            words.append(said)
    return "must be " + ", or ".join(words)


@functools.cache
def _adapter(knob: Knob) -> Any:
    """pydantic's validator for the knob's type and bounds (built on first use)."""
    from pydantic import Field, TypeAdapter

    bounds = {b: getattr(knob, b) for b in ("ge", "gt", "le", "lt") if getattr(knob, b) is not None}
    if knob.finite:
        bounds["allow_inf_nan"] = False
    tp: Any = typing.Annotated[knob.type, Field(**bounds)] if bounds else knob.type
    return TypeAdapter(tp)


def check(knob: Knob, value: Any) -> Any:
    """`value` as the knob's type, or KnobValueError saying in plain words what it must be."""
    if knob.error and isinstance(value, bool):
        raise KnobValueError(knob.error, value)
    out = _exact(knob.type, value)
    if out is not _NO and _in_bounds(knob, out):
        return out
    from pydantic import ValidationError

    try:
        return _adapter(knob).validate_python(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        loc = tuple(p for p in first["loc"] if isinstance(p, int))  # union members aside
        raise KnobValueError(knob.error or plain(errors), first.get("input"), loc) from None
