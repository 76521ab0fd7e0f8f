"""The rules between fields and the coercion by type, as pure functions over the schema.

- aliases: a knob's `alias` (batch_size) is another spelling of its name; `canonical`
  renames them and names the ones written beside a different value of their knob.
- pins: the knobs marked `pin` are the plan's resolved_parallelism that pins it.
- `checkpointing_mode`: activation_checkpointing, else gradient_checkpointing's alias.
- `coerce`: a job.json value to its field's type, leniently (the planner already validated
  it; a hand-written spec may say "on" or 2.0): the trainer's reading of every knob.
- `keeps_text`: a `--set` text that is one of the knob's Literal values stays text
  (`activation_checkpointing=none` is the mode "none", not "not set").
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.knobs.schema import Knob, literal_values, table

if TYPE_CHECKING:
    from veri_tui.jobfolder.knobs.fields import Checkpointing

_TRUE = ("on", "true", "1", "yes")
_FALSE = ("off", "false", "0", "no")


def aliases(cls: type) -> dict[str, str]:
    """alias -> name for every knob of `cls` that has one."""
    return {k.alias: k.name for k in table(cls) if k.alias}


def canonical(values: Mapping[str, Any], cls: type) -> tuple[dict[str, Any], list[Knob]]:
    """`values` under canonical names (the name wins over its alias), and the knobs whose
    alias was written beside the name with a different value."""
    out = dict(values)
    clashes = []
    for k in table(cls):
        if k.alias and k.alias in out:
            value = out.pop(k.alias)
            if k.name in out and out[k.name] != value:
                clashes.append(k)
            out.setdefault(k.name, value)
    return out, clashes


def pin_keys(cls: type) -> tuple[str, ...]:
    """The knobs that pin a plan, in field order."""
    return tuple(k.name for k in table(cls) if k.pin)


def checkpointing_mode(
    activation_checkpointing: Checkpointing | None, gradient_checkpointing: bool
) -> Checkpointing:
    """The checkpointing mode: activation_checkpointing, else its alias gradient_checkpointing
    (on = full, off = none)."""
    if activation_checkpointing is not None:
        return activation_checkpointing
    return "full" if gradient_checkpointing else "none"


def keeps_text(knob: Knob | None, text: str) -> bool:
    """True when `text` is one of the knob's Literal values spelled out (kept as text)."""
    return knob is not None and text in knob.literals


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    if isinstance(value, int):
        return bool(value)
    raise ConfigError(f"{key}: expected true/false, got {value!r}")


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    try:
        out = int(value)
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if float(value) != out:
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    return out


def _as_float(key: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a number, got {value!r}") from None


def coerce(key: str, tp: Any, value: Any) -> Any:
    """`value` as field type `tp` (None stays None); ConfigError naming `key` otherwise."""
    if value is None:
        return None
    members = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(members) == 1:
        tp = members[0]  # X | None
    literals = literal_values(tp)
    if value in literals and not isinstance(value, bool):
        return value
    if typing.get_origin(tp) is Literal:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, literals))}")
    if isinstance(value, list) and literals:  # report_to: a list of the Literal's values
        bad = [v for v in value if v not in literals or isinstance(v, bool)]
        if bad:
            raise ConfigError(f"{key}: {bad[0]!r} is not one of {', '.join(map(str, literals))}")
        return list(value)
    if literals and int not in members:  # Literal[...] | list[Literal[...]]: a bad name
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, literals))}")
    base = int if literals else tp  # Literal["auto"] | int: the literal, else the number
    if base is bool:
        return _as_bool(key, value)
    if base is int:
        return _as_int(key, value)
    if base is float:
        return _as_float(key, value)
    if base is str:
        return str(value)
    return value
