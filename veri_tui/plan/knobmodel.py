"""The planner's face on a schema dataclass: validated construction, copies and dumps.

`KnobModel` gives a class made of the schema's fields (veri_tui/jobfolder/knobs) its knobs by
name (`knob_table`), the names given at construction (`fields_given`), a checked copy
(`copy_with(update=)`), a dict and back (`to_dict()`, `from_dict()`): named for what they do,
not after pydantic's model API, which they once mirrored. Each value is checked by
`knobcheck.check` (pydantic's rules and messages) and every refusal collected into one
`KnobErrors`, in field order, as a pydantic ValidationError would list them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar, Self, cast

from veri_tui.jobfolder.knobs import Knob, table
from veri_tui.plan.knobcheck import KnobValueError, check


class KnobErrors(ValueError):
    """Every refused value of one construction: `errors()` lists loc, msg and input."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
        self._errors = errors

    def errors(self) -> list[dict[str, Any]]:
        """One dict per refusal: `loc` (the key path), `msg`, `input`."""
        return list(self._errors)


class KnobModel:
    """A schema dataclass's values, checked; `nested` names the fields that are models."""

    knob_table: ClassVar[dict[str, Knob]] = {}
    nested: ClassVar[dict[str, type[KnobModel]]] = {}
    _aliases: ClassVar[dict[str, str]] = {}
    fields_given: set[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A class hashes by identity whatever its instances do (they are mutable).
        cls.knob_table = {k.name: k for k in table(cast(type, cls))}
        cls._aliases = {k.alias: k.name for k in cls.knob_table.values() if k.alias}

    def __init__(self, **data: Any) -> None:
        given = {self._aliases.get(k, k): v for k, v in data.items()}
        errors = [
            {"loc": (k,), "msg": "Extra inputs are not permitted", "input": data[k]}
            for k in data
            if self._aliases.get(k, k) not in self.knob_table and k not in self.nested
        ]
        values: dict[str, Any] = {}
        for name, knob in self.knob_table.items():
            if name in given:
                try:
                    values[name] = check(knob, given[name])
                except KnobValueError as exc:
                    errors.append({"loc": (name, *exc.loc), "msg": exc.msg, "input": exc.input})
        for name, model in self.nested.items():
            raw = given.get(name, {})
            try:
                values[name] = raw if isinstance(raw, model) else model.from_dict(raw)
            except KnobErrors as exc:
                errors += [{**e, "loc": (name, *e["loc"])} for e in exc.errors()]
        if errors:
            raise KnobErrors(errors)
        for name, knob in self.knob_table.items():
            setattr(self, name, values.get(name, knob.default))
        for name in self.nested:
            setattr(self, name, values[name])
        self.fields_given = {k for k in given if k in values}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """A model from a mapping of raw values (KnobErrors lists every refusal)."""
        if not isinstance(data, Mapping):
            msg = "Input should be a valid dictionary"
            raise KnobErrors([{"loc": (), "msg": msg, "input": data}])
        return cls(**data)

    def copy_with(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A shallow copy with `update`'s values set as given (not checked), and marked set."""
        out = copy.copy(self)
        out.fields_given = set(self.fields_given) | set(update or ())
        for key, value in (update or {}).items():
            setattr(out, key, value)
        return out

    def to_dict(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        """Every field in field order (models nested as dicts); None left out on request."""
        out: dict[str, Any] = {}
        for name in (*self.knob_table, *self.nested):
            value = getattr(self, name)
            if isinstance(value, KnobModel):
                value = value.to_dict(mode=mode, exclude_none=exclude_none)
            elif isinstance(value, list):
                value = list(value)
            if value is not None or not exclude_none:
                out[name] = value
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic models are

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={getattr(self, k)!r}" for k in (*self.knob_table, *self.nested))
        return f"{type(self).__name__}({shown})"
