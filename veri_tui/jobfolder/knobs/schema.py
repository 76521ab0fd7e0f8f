"""What a knob is, as data: `Knob`, the `knob()` that declares one, `table()` that reads them.

A knob is a dataclass field whose metadata holds a `Knob`; `table(cls)` returns the class's
knobs in field order, each with its name, resolved type and default filled in. Everything
that lists knobs (the planner's validation, the trainer's coercion, the app's form,
`plan --help`) reads this table instead of keeping its own list.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, NamedTuple


class Knob(NamedTuple):
    """One field of the schema. `section`, `label`, `hint`, `choices`, `widget` and
    `methods` place it on the app's form ("" section: not on the form). A NamedTuple, not a
    dataclass: a dataclass costs ~1 ms to define, and every job folder command imports this."""

    description: str
    name: str = ""
    type: Any = None
    default: Any = None
    unit: str = ""  # what the number counts: tokens, steps, bytes, seconds, USD, Gb/s
    ge: float | None = None  # bounds, as pydantic's Field(ge=, gt=, le=, lt=)
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    finite: bool = False  # a float that must not be inf or NaN
    alias: str = ""  # another name the user may write (batch_size)
    pin: bool = False  # copied from the plan's resolved_parallelism: it pins the plan
    multi_gpu: bool = False  # a multi-GPU key (refused for methods with their own layout)
    unavailable: str = ""  # what it would turn on, not available: only its default is run
    available: tuple[Any, ...] = ()  # the values that run (empty: any its type allows)
    error: str = ""  # the one message for any bad value (else the type's own); bools refused
    section: str = ""
    label: str = ""
    hint: str = ""
    choices: tuple[str, ...] = ()
    widget: str = ""  # "select" where the choices come from elsewhere (the GPU catalog)
    methods: tuple[str, ...] = ()  # only these methods read it (empty: every method)

    @property
    def literals(self) -> tuple[Any, ...]:
        """The Literal values its type allows (empty when it has none)."""
        return literal_values(self.type)

    def offered(self, value: Any) -> str:
        """How the refusal of ``value`` (not `available`) reads: one of the choices that does
        not run, or an unknown one; the way out is the values that run."""
        if self.error:
            return f"{self.error} (got {value!r})"
        either = " or ".join(map(str, self.available))
        if str(value) in self.choices:
            return f"{value} is not available; use {either}"
        return f"unknown {self.name} {value!r}; use {either}"

    @property
    def kind(self) -> str:
        """The form's editor: "switch" for a bool, "select" for choices, else "input"."""
        if self.type is bool:
            return "switch"
        return "select" if self.choices or self.widget == "select" else "input"


def knob(default: Any, description: str, **meta: Any) -> Any:
    """A schema field: its default, its description and the `Knob` metadata in `meta`."""
    return dataclasses.field(default=default, metadata={"knob": Knob(description, **meta)})


def literal_values(tp: Any) -> tuple[Any, ...]:
    """The values of every Literal in `tp` (a Literal, or a union holding some)."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(v for arg in typing.get_args(tp) for v in literal_values(arg))
    return ()


@functools.cache
def table(cls: type) -> tuple[Knob, ...]:
    """The knobs of dataclass `cls` (its bases' included), in field order, each complete."""
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("knob")
        if isinstance(meta, Knob):
            # A string annotation (a module with `from __future__ import annotations`) is
            # resolved; the schema's own are objects already.
            tp = typing.get_type_hints(cls)[f.name] if isinstance(f.type, str) else f.type
            out.append(meta._replace(name=f.name, type=tp, default=f.default))
    return tuple(out)


def by_name(cls: type) -> dict[str, Knob]:
    """`table(cls)` keyed by name, aliases included (batch_size -> micro_batch_size's knob)."""
    out = {k.name: k for k in table(cls)}
    out.update({k.alias: k for k in table(cls) if k.alias})
    return out
