"""The one reader of the plan line in a job's plan header.

The spec's `plan_header` (what the planner printed: the parameter count, the budget, the
decision, then `plan: dp=... (auto: x.x GB states/GPU)`, then warnings) is written by
veri_tui.launch.spec and printed first in the job log by rank 0. The supervisor's failure
report, the hang watchdog's, `veri-tui jobs JOB` and the app's monitor all quote its plan
line: they read it here. A header holds one plan line; the first is taken.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "plan:"
NOT_RECORDED = "plan: (not recorded)"


def plan_line(header: object) -> str | None:
    """The first `plan: ...` line of a plan header (a list of lines), or None."""
    if not isinstance(header, list):
        return None
    return next((str(ln) for ln in header if str(ln).startswith(PREFIX)), None)


def plan_line_of(spec: Mapping[str, object] | None, default: str = "") -> str:
    """The plan line of a job spec's `plan_header`, else ``default``."""
    found = plan_line((spec or {}).get("plan_header"))
    return default if found is None else found
