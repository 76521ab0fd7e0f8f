"""The resume key (R) on the jobs screen and on a failed job's monitor, driving the real app.

The failed job is a real job record (planned by the core, paths resolved as `launch` writes
them) left `failed` without checkpoints; R starts a real new attempt in its folder (the
supervisor, torchrun, 2 CPU ranks, 3 steps of the tiny model), which the monitor follows to
`succeeded`. A succeeded job is not resumed: the key says why.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_helpers import DATA_ERROR, editor_ready, until, write_job
from textual.widgets import DataTable

from veri_tui.app import create_app
from veri_tui.app.screens.jobs import JobsScreen
from veri_tui.app.screens.monitor import MonitorScreen
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.launch.spec import build_record
from veri_tui.plan import load_job_config, plan_job

STEPS = 3


def failed_job(home: Path, job_id: str) -> Path:
    """A real job's folder as a failed first attempt leaves it (no checkpoint written)."""
    folder = home / "jobs" / job_id
    folder.mkdir(parents=True)
    job = load_job_config(None, gpu_count=2, sets=[f"max_steps={STEPS}", "max_seq_length=64"])
    record = build_record(job, plan_job(job), job_id, folder)
    write_json_atomic(
        folder / "job.json",
        {**record, "status": "failed", "started_at": "2026-11-29T22:00:01+00:00",
         "ended_at": "2026-11-29T22:00:09+00:00", "error": DATA_ERROR},
    )  # fmt: skip
    (folder / "log.txt").write_text("\n".join([*record["spec"]["plan_header"], "killed"]) + "\n")
    return folder


def _attempts(folder: Path) -> list[dict]:
    return json.loads((folder / "job.json").read_text()).get("attempts") or []


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_resume_key_on_the_jobs_screen_and_the_monitor(veri_home: Path) -> None:
    folder = failed_job(veri_home, "20261129-220000-abcd")
    write_job(veri_home, "20261129-210000-0001")  # succeeded
    app = create_app()
    seen: list[str] = []
    notify = app.notify

    def noting(message: str, **kw) -> None:
        seen.append(str(message))
        notify(message, **kw)

    app.notify = noting  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await pilot.press("ctrl+b")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        table = app.screen.query_one(DataTable)
        assert table.get_row_at(1)[:2] == ["20261129-210000-0001", "succeeded"]
        await pilot.press("down", "R")  # the succeeded job: refused, nothing started
        await pilot.pause()
        assert isinstance(app.screen, JobsScreen)
        assert "only a failed or cancelled job resumes" in seen[-1]
        await pilot.press("up", "R")  # the failed one: a new attempt, then its monitor
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen), "the monitor", polls=2400)
        screen = app.screen
        assert screen.job_id == "20261129-220000-abcd"
        await until(pilot, lambda: screen.status == "succeeded", "attempt 2 to succeed", polls=2400)
        assert [(a["attempt"], a["status"]) for a in _attempts(folder)] == [
            (1, "failed"),
            (2, "succeeded"),
        ]
        assert [m["step"] for m in screen.metrics] == list(range(1, STEPS + 1))
        assert not screen.query_one("#failure").display

        # On the monitor: R on the succeeded job says why not; on a failed one it resumes.
        await pilot.press("R")
        await pilot.pause()
        assert "only a failed or cancelled job resumes" in seen[-1]
        record = json.loads((folder / "job.json").read_text())
        record["status"] = "cancelled"  # as a cancel of attempt 2 would have left it
        write_json_atomic(folder / "job.json", record)
        await pilot.press("d")
        app.open_monitor("20261129-220000-abcd")
        await until(
            pilot, lambda: getattr(app.screen, "status", "") == "cancelled", "cancel", polls=2400
        )
        screen = app.screen
        await pilot.press("R")
        await until(pilot, lambda: len(_attempts(folder)) == 3, "attempt 3 to begin", polls=2400)
        await until(pilot, lambda: screen.status == "succeeded", "attempt 3 to succeed", polls=2400)
        assert _attempts(folder)[-1]["status"] == "succeeded"
        log = screen.query_one("#log-tail")
        assert any("resume: attempt 3 from step 0 (no checkpoint)" in ln for ln in log.lines)
