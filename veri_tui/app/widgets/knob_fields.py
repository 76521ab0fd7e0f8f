"""The fields of the plan editor: every job field and knob of the schema that names a form
section (veri_tui/jobfolder/knobs/fields.py), in the schema's order within each section.

Presentation only: which widget edits a key, its label, its unit. The meaning of each key
lives in the schema: its default and its description (the full help shown when the field
has focus) are read from there, so the form never disagrees with the core. The checks live
in `job_from_fields` / `validate`; an empty input means "not set", so the core applies its
own default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veri_tui.jobfolder.knobs import Knob
from veri_tui.jobfolder.knobs.fields import SECTIONS
from veri_tui.plan.knobs import Hyperparameters, JobConfig


@dataclass(frozen=True)
class FieldSpec:
    """One editable key: `widget` is "input", "select" or "switch"; `section` is set on the
    first field of a section (the form puts the section's title above it).

    An input's placeholder is a short hint that fits the field: `hint` when given (keys whose
    default says nothing by itself, e.g. None = "auto"), else the default with its `unit`."""

    knob: Knob
    section: str = ""

    @property
    def key(self) -> str:
        """The knob's name."""
        return self.knob.name

    @property
    def label(self) -> str:
        """The label beside the editor (the knob's name unless the schema gives one)."""
        return self.knob.label or self.knob.name

    @property
    def widget(self) -> str:
        """ "switch" (a bool), "select" (choices) or "input"."""
        return self.knob.kind

    @property
    def options(self) -> tuple[str, ...]:
        """A select's choices (empty: the form gives them, as the GPU catalog)."""
        return self.knob.choices

    @property
    def methods(self) -> tuple[str, ...]:
        """Shown only for these methods (empty: always)."""
        return self.knob.methods

    @property
    def default(self) -> Any:
        """The core's default for this key (what an unset key means)."""
        return self.knob.default

    @property
    def help(self) -> str:
        """The key's full description, as the core documents it."""
        return self.knob.description

    @property
    def placeholder(self) -> str:
        """The short hint an empty input shows: `auto`, `default 1`, `2048 tokens`."""
        if self.knob.hint:
            return self.knob.hint
        unit = self.knob.unit
        return f"{self.default} {unit}" if unit else f"default {self.default}"


def _fields() -> tuple[FieldSpec, ...]:
    shown = [k for cls in (JobConfig, Hyperparameters) for k in cls.knob_table.values()]
    ordered = sorted((k for k in shown if k.section), key=lambda k: SECTIONS.index(k.section))
    out, last = [], ""
    for k in ordered:
        out.append(FieldSpec(k, k.section if k.section != last else ""))
        last = k.section
    return tuple(out)


FIELDS: tuple[FieldSpec, ...] = _fields()
