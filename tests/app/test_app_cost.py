"""The plan editor's cost pane: counted in a worker (the editor stays live meanwhile), then
every edit re-plans from the cached count at once."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

from app_helpers import editor_ready
from textual.widgets import Input

import veri_tui.plan.cost as cost_module
from veri_tui.app import create_app
from veri_tui.app.widgets.cost_view import CostView

ROOT = Path(__file__).resolve().parents[2]


def _cost(screen) -> str:
    return str(screen.query_one(CostView).render())


def _rows(path: Path, n: int) -> Path:
    rows = (ROOT / "assets" / "data" / "sft.jsonl").read_text().splitlines()
    lines = (f'{r[:-2]} (row {i})"}}' for i, r in zip(range(n), itertools.cycle(rows)))
    path.write_text("\n".join(lines) + "\n")
    return path


async def _set(pilot, key: str, value: str) -> None:
    pilot.app.screen.query_one(f"#knob-{key}", Input).value = value
    await pilot.pause()


async def test_cost_is_counted_in_a_worker_then_follows_the_knobs(
    veri_home: Path, tmp_path: Path, monkeypatch
) -> None:
    data = _rows(tmp_path / "data.jsonl", 20_000)
    # The worker's count waits for this gate, so the test sees the editor answer while the
    # count is still running, however fast the machine counts (it raced on a quiet box).
    gate = threading.Event()
    real = cost_module.job_tokens

    def gated(job, model_path, count=True):
        if count:  # the worker's count; the editor's cache-only lookups pass straight through
            gate.wait(60)
        return real(job, model_path, count)

    monkeypatch.setattr(cost_module, "job_tokens", gated)
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        screen = app.screen
        assert _cost(screen).startswith("cost: not estimated (no dataset given")
        await _set(pilot, "dataset", str(data))
        # The editor answered at once: the plan is there, the count still running.
        assert screen.record is not None and screen.record.cost.get("pending")
        assert [w.group for w in app.workers] == ["tokens"]
        assert _cost(screen).startswith("cost: counting the dataset's tokens...")
        gate.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        cost = screen.record.cost
        assert cost["known"] and cost["dataset_rows"] == 20_000
        assert _cost(screen).startswith("cost: ") and " on 1 x L4-24GB = " in _cost(screen)
        assert "20,000 steps" in _cost(screen) and "tokens in 20,000 rows" in _cost(screen)

        # Every edit re-plans from the cache: no worker, the figures follow at once.
        await _set(pilot, "gpu_count", "2")
        assert not list(app.workers) and " on 2 x L4-24GB = " in _cost(screen)
        assert screen.record.cost["steps"] == 10_000  # gbs 2: floor(20,000 / 2)
        await _set(pilot, "price_per_gpu_hour", "2.5")
        assert "at $2.50/GPU-hour" in _cost(screen) and "price: price_per_gpu_hour" in _cost(screen)
        assert screen.record.cost["price"] == screen.record.cost["gpu_hours"] * 2.5


async def test_a_bad_dataset_says_why(veri_home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 3}\n')
    app = create_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await editor_ready(pilot)
        await _set(pilot, "dataset", str(bad))
        await app.workers.wait_for_complete()
        await pilot.pause()
        text = _cost(app.screen)
        assert text.startswith(f"cost: not estimated ({bad} line 2: `text` must be")
        assert not list(app.workers)  # remembered: the re-plan does not count it again
