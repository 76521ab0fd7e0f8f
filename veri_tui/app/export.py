"""Export the edited job as a veri.toml that `veri-tui plan`/`launch` read back.

The layout is the seed's rule (contracts section 1): job keys at top level, hyperparameters
under `[method]`, with the method's name as `name` inside that table (how the core reads
it). Only the keys the user set are written, so "auto" and defaults stay unpinned in the
file, exactly as in the editor. The core has no TOML writer (tomllib only reads), and the
values are flat scalars, so a small writer is enough here.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

JOB_KEYS = ("model", "gpu", "gpu_count", "dataset", "output")


def toml_value(value: Any) -> str:
    """One TOML scalar; JSON string escapes are valid TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value} to TOML")
        return repr(value)
    return json.dumps(str(value))


def job_toml(job: Any) -> str:
    """The text of a veri.toml for a `JobConfig` (set keys only)."""
    lines = []
    for key in JOB_KEYS:
        value = getattr(job, key, None)
        if value is not None:
            lines.append(f"{key} = {toml_value(value)}")
    knobs = job.hyperparameters.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    # A top-level `method = ...` would clash with the [method] table: the name goes inside.
    lines += ["", "[method]", f"name = {toml_value(job.method)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in sorted(knobs.items())]
    return "\n".join(lines) + "\n"


def write_veri_toml(job: Any, folder: Path) -> Path:
    """Write `folder/veri.toml` aside and rename it into place; returns its path."""
    target = folder / "veri.toml"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".veri.toml.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(job_toml(job))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
