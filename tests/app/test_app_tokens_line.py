"""The plan editor names the plan's tokens/s (it drew only a chart): the line `veri-tui plan`
prints, above the throughput charts, following the knobs as they are edited."""

from __future__ import annotations

from pathlib import Path

from app_helpers import editor_ready, settle, type_into
from textual.widgets import Select, Static

from veri_tui.app import create_app
from veri_tui.plan import job_from_fields, plan_job


def _line(screen) -> str:
    return str(screen.query_one("#throughput-line", Static).render())


async def test_the_plans_tokens_per_second_are_shown(veri_home: Path) -> None:
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        screen.query_one("#knob-gpu", Select).value = "H100-80GB"
        await type_into(pilot, "#knob-gpu_count", "2")
        await settle(pilot)
        tp = plan_job(job_from_fields({"gpu": "H100-80GB", "gpu_count": "2"})).throughput
        assert _line(screen) == (
            f"throughput: ~{tp['tokens_per_s']:,.0f} tokens/s, step {tp['step_time_s']:.2f} s, "
            f"scaling efficiency {tp['scaling_efficiency']:.0%}"
        )
        assert screen.record.throughput == tp

        # A GPU without a known peak: said, not left blank.
        screen.query_one("#knob-gpu", Select).value = "custom"
        await type_into(pilot, "#knob-gpu_custom", "48")
        await settle(pilot)
        assert _line(screen).startswith("throughput: not estimated (")

        # No valid plan: no line.
        await type_into(pilot, "#knob-gpu_count", "-1")
        await settle(pilot)
        assert not screen.query_one("#throughput-line").display
