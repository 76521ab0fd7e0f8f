"""The knob schema: every job field and hyperparameter, defined once (contracts section 1).

Standard library only, so both sides read the same fields: the planner validates what a
user typed against them (veri_tui/plan/knobs.py), the trainer coerces job.json's values by
their types (veri_tui/trainer/config.py), and the app's form and `veri-tui plan --help` list them.
A field is its type (a Literal where the values are few), default, description, unit, pin
flag and alias: the knobs in `fields.py`, the job's own fields in `job.py`. `schema.py`
reads them as data; `rules.py` holds the rules between fields (aliases, the checkpointing
mode) and the coercion by type.
"""

from veri_tui.jobfolder.knobs.fields import (
    CHECKPOINTING,
    DEFAULT_GPU,
    METHODS,
    METHODS_OTHER,
    METHODS_TRAINED,
    Hyperparameters,
)
from veri_tui.jobfolder.knobs.job import Job
from veri_tui.jobfolder.knobs.rules import pin_keys
from veri_tui.jobfolder.knobs.schema import Knob, by_name, knob, table

#: The knobs of `resolved_parallelism` that pin the plan (the schema's `pin` flags): copied
#: into hyperparameters they make `plan` decide the same again, and the trainer takes them
#: from the plan the user saw.
PIN_KEYS = pin_keys(Hyperparameters)

__all__ = [
    "CHECKPOINTING",
    "DEFAULT_GPU",
    "METHODS",
    "METHODS_OTHER",
    "METHODS_TRAINED",
    "PIN_KEYS",
    "Hyperparameters",
    "Job",
    "Knob",
    "by_name",
    "knob",
    "table",
]
