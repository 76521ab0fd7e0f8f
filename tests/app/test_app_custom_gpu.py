"""A GPU outside the catalog in the plan editor: the GPU select's `custom-<N>GB` choice and
its memory row, planned as `veri-tui plan --gpu custom-<N>GB` plans it (its own help names
custom-48GB; the form offered the catalog only)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from app_helpers import editor_ready, type_into
from textual.widgets import Select, Static

from veri_tui.app import create_app
from veri_tui.app.widgets.knob_form import KnobForm
from veri_tui.plan import job_from_fields, plan_job


def _plan_line(screen) -> str:
    return str(screen.query_one("#plan-line", Static).render())


async def test_a_custom_gpu_is_planned_as_the_cli_plans_it(veri_home: Path, tmp_path: Path) -> None:
    app = create_app(workdir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        row = screen.query_one("#knob-gpu_custom")
        assert not row.display  # only for the custom choice
        screen.query_one("#knob-gpu", Select).value = "custom"
        await pilot.pause()
        assert row.display and screen.query_one("#label-gpu_custom").display
        await type_into(pilot, "#knob-gpu_custom", "48")
        assert screen.fields()["gpu"] == "custom-48GB"
        cli = plan_job(job_from_fields({"gpu": "custom-48GB"}))
        assert _plan_line(screen) == cli.plan_line
        assert screen.record.header_lines == cli.header_lines
        assert "on custom-48GB x1" in screen.record.header_lines[1]

        # A size the core refuses is shown under the GPU field, in the core's words.
        await type_into(pilot, "#knob-gpu_custom", "0")
        assert "custom memory must be 1-10000 GB" in str(screen.query_one("#err-gpu").render())
        assert _plan_line(screen).startswith("plan refused")
        # No bigger than the 2 GiB reserve: refused, saying why (it was planned with a 0.0 GB
        # budget, every way out "still over: 0.0 GB/GPU").
        await type_into(pilot, "#knob-gpu_custom", "2")
        assert str(screen.query_one("#err-gpu").render()).startswith(
            "custom-2GB: 2 GB is all taken by the 2.15 GB (2 GiB) reserved per GPU"
        )
        assert _plan_line(screen).startswith("plan refused")

        await type_into(pilot, "#knob-gpu_custom", "80")
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert tomllib.loads((tmp_path / "veri.toml").read_text())["gpu"] == "custom-80GB"

        # Back to a catalog GPU: the memory row goes, the catalog name is planned.
        screen.query_one("#knob-gpu", Select).value = "H100-80GB"
        await pilot.pause()
        assert not row.display and screen.fields()["gpu"] == "H100-80GB"

        # Values put into the form (pin, a suggestion) take a custom name too.
        screen.query_one(KnobForm).set_values({"gpu": "custom-24GB"})
        await pilot.pause()
        assert row.display and screen.fields()["gpu"] == "custom-24GB"
        assert screen.query_one("#knob-gpu", Select).value == "custom"
