"""Writing a job as a veri.toml: the inverse of `load_job_config` for one file.

The layout is the one the reader takes (contracts section 1): job keys at top level, the
knobs under `[method]` with the method's name as `name` inside that table (TOML cannot hold
both `method = "dpo"` and a `[method]` table). Only the knobs the user set are written, so
"auto" and the defaults stay unpinned in the file; `load_job_config` reads the text back to
an equal JobConfig. Paths are written as given: the reader takes a relative dataset/output
(and a model path starting with `.`) relative to the file's folder, so an absolute path is
what survives a move of the file.

tomllib only reads, and every value here is a scalar, a list or an inline table (a
dataset's), so a small writer is enough.
"""

from __future__ import annotations

import math
from typing import Any

from veri_tui.plan.knobs import JobConfig

#: Job keys written at top level, in the schema's order (the method goes inside [method]).
TOP_KEYS = tuple(k for k in JobConfig.knob_table if k != "method")

# TOML basic strings must escape the quote, the backslash and every control character but
# tab (U+0000-U+001F, U+007F); everything else is written as UTF-8 text.
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string for `text`."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch != "\t" and (ord(ch) < 0x20 or ord(ch) == 0x7F):
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """One TOML scalar: bool, 64-bit int, float (inf allowed; NaN never reads back equal), text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:  # TOML integers are 64-bit
            raise ValueError(f"{value} does not fit a TOML integer (64-bit)")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("NaN cannot be written to a veri.toml")
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)  # shortest text that reads back to the same float
    if isinstance(value, list):  # hosts = ["a", "b"]; a mixture of datasets
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # a dataset's table: {path = "...", columns = {...}}
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return toml_string(str(value))


def job_to_toml(job: JobConfig) -> str:
    """The text of a veri.toml for `job` (the knobs it set, under [method])."""
    lines = []
    for key in TOP_KEYS:
        value = getattr(job, key)
        if value is not None:  # None is "not set": the reader applies its default
            lines.append(f"{key} = {toml_value(value)}")
    lines += ["", "[method]", f"name = {toml_value(job.method)}"]
    for key, value in job.hyperparameters_set().items():
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"
