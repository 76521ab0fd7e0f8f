"""The job and its hyperparameters as the planner holds them (contracts section 1).

The fields, their types, defaults and descriptions are the knob schema's
(veri_tui/jobfolder/knobs/fields.py, shared with the trainer); here they gain the planner's
validation and model API (knobmodel.py). Every knob carries a description: the app shows it
beside its field and `veri-tui plan --help` lists it. Types are checked here; combinations
are checked in `validate.py`, so that all refusals of a config are reported together.
"""

from __future__ import annotations

from typing import Any

from veri_tui.jobfolder import knobs as schema
from veri_tui.jobfolder.knobs import DEFAULT_GPU, METHODS, METHODS_OTHER, METHODS_TRAINED, table
from veri_tui.plan.knobmodel import KnobErrors, KnobModel

__all__ = ["DEFAULT_GPU", "METHODS", "METHODS_OTHER", "METHODS_TRAINED"]


class Hyperparameters(KnobModel, schema.Hyperparameters):
    """Every knob of a job: the multi-GPU ones of the seed and the trainer's training keys."""


class JobConfig(KnobModel, schema.Job):
    """A job: method + model + GPU type + gpu_count + dataset + output + hyperparameters."""

    hyperparameters: Hyperparameters
    nested = {"hyperparameters": Hyperparameters}

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        from veri_tui.jobfolder.data.source import sources_of

        errors = []
        # their forms: veri_tui/jobfolder/data/source.py
        for key in ("dataset", "eval_dataset"):
            try:
                sources_of(getattr(self, key))
            except ValueError as exc:
                errors.append({"loc": (key,), "msg": str(exc), "input": getattr(self, key)})
        if errors:
            raise KnobErrors(errors)

    @property
    def nodes(self) -> int:
        """Machines the job runs on: one per host, else `node_count` (1 without either)."""
        return max(len(self.hosts or ()), self.node_count or 1)

    def hyperparameters_set(self) -> dict[str, Any]:
        """Only the knobs the user set, under their canonical names (for records and pins)."""
        hp = self.hyperparameters
        return {k: getattr(hp, k) for k in sorted(hp.fields_given)}


MULTI_GPU_KEYS = tuple(k.name for k in table(schema.Hyperparameters) if k.multi_gpu)

# Knobs that are the job's own (contracts section 1) but may be written among the
# hyperparameters, as the seed does ("Set gpu_count above 1 on ... job").
JOB_KEYS = tuple(JobConfig.knob_table)
