"""The launch screen's canary line: its limits (max cost, max hours, headroom), beside
which the Canary button (^k) launches the job with `--canary 3` (docs/canary.md).

The job then runs 3 steps on the longest samples, saves and loads back a checkpoint and
waits at the gate; its supervisor judges the measurements against these limits and prints
the measured-vs-planned table into the log the monitor follows: go continues the same
ranks, no-go stops them (the monitor shows `cancelled` and the gate's line). Empty limits
judge nothing but the memory headroom (10%) and the resume check. The values are checked
as `veri-tui launch --canary` checks them (one `error:` line naming the flag).
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label

from veri_tui.errors import VeriError

STEPS = 3
#: (key, placeholder), as `veri-tui launch`'s flags (--max-cost, --max-hours, --headroom).
LIMITS = (("max_cost", "max cost $"), ("max_hours", "max hours"), ("headroom", "headroom 0.1"))


class CanaryFields(Horizontal):
    """The canary's limits as typed; `canary()` gives the spec's `canary`."""

    DEFAULT_CSS = "CanaryFields { height: auto; } CanaryFields Input { width: 16; }"

    def compose(self) -> ComposeResult:
        yield Label("canary", classes="field-label")
        for key, hint in LIMITS:
            yield Input(placeholder=hint, id=f"canary-{key}", classes="canary-field")

    def canary(self) -> dict[str, Any]:
        """{"steps": 3, and each limit typed}; VeriError naming the flag for a bad one."""
        from veri_tui.launch.jobs import canary_spec

        given: dict[str, float | None] = dict.fromkeys(k for k, _ in LIMITS)
        for key, _ in LIMITS:
            text = self.query_one(f"#canary-{key}", Input).value.strip()
            try:
                given[key] = float(text) if text else None
            except ValueError:
                raise VeriError(f"--{key.replace('_', '-')} {text}: not a number", key) from None
        spec = canary_spec(STEPS, **given)
        assert spec is not None
        return spec
