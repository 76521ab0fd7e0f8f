"""veri-tui in a notebook: `plan_view` (a plan as HTML) and `app` (the served app in an IFrame).

    from veri_tui.notebook import plan_view, app
    plan_view(gpu="H100-80GB", gpu_count=8, lora_rank=16)   # or plan_view(record)
    app()                                                   # the whole app, in the cell

A `veri_tui.plan.plan()` record renders the same HTML by itself (`PlanRecord._repr_html_`).
Needs no ipywidgets or IPython import: both return objects with `_repr_html_`. Nothing here
is imported by `veri_tui.plan` until a record is displayed as HTML.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from veri_tui.notebook.served import ServedApp, app

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord

__all__ = ["PlanView", "ServedApp", "app", "plan_view"]


@dataclass(frozen=True)
class PlanView:
    """A plan (`record`) or the refusals that stopped one (`errors`), shown as HTML."""

    record: PlanRecord | None = None
    errors: tuple[str, ...] = ()

    def _repr_html_(self) -> str:
        from veri_tui.plan.html import record_html, refusals_html

        if self.record is None:
            return refusals_html(list(self.errors))
        return record_html(self.record)

    def __str__(self) -> str:
        return str(self.record) if self.record is not None else "\n".join(self.errors)


def plan_view(record: PlanRecord | None = None, **fields: Any) -> PlanView:
    """Show `record`, or plan `fields` (the arguments of `veri_tui.plan.plan`) and show that.

    A job the core refuses shows its refusals (in red) instead of raising VeriError.
    """
    if record is not None:
        return PlanView(record)
    from veri_tui.errors import VeriError
    from veri_tui.plan import plan

    try:
        return PlanView(plan(**fields))
    except VeriError as exc:
        return PlanView(errors=tuple(str(e) for e in exc.errors))
