"""Helpers for the app tests: job folders with fixed data, a header-only big model, and
waiting for the plan editor.

Job folders follow docs/interfaces.md section 2 with fixed timestamps and losses, so the
run monitor renders the same frame every time (snapshot tests rely on it). Imported by
name (`from app_helpers import ...`), not from conftest, so another folder's conftest can
never shadow it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.synthetic import write_checkpoint

PLAN_LINE = (
    "plan: dp=2 zero_stage=3 tp=1 cp=1 mbs=1 grad_acc=1 gbs=2 precision=bf16 "
    "gradient_checkpointing=on (auto: 0.0 GB states/GPU)"
)


def write_job(
    home: Path,
    job_id: str,
    *,
    status: str = "succeeded",
    steps: int = 20,
    total: int = 20,
    error: dict[str, Any] | None = None,
    eval_steps: int = 0,
) -> Path:
    """A finished job folder as the launcher and trainer leave it, with fixed data."""
    folder = home / "jobs" / job_id
    folder.mkdir(parents=True)
    header = [
        "model: tiny-model (bundled): 1,234,567 parameters",
        "budget: 15.3 GB per GPU (L4-24GB)",
        "decision: states fit one GPU",
        PLAN_LINE,
    ]
    record = {
        "job_id": job_id,
        "status": status,
        "created_at": "2026-11-29T22:00:00+00:00",
        "started_at": "2026-11-29T22:00:01+00:00",
        "ended_at": "2026-11-29T22:01:03+00:00",
        "host": None,
        "spec": {
            "method": "sft_text",
            "model": "tiny-model",
            "gpu": "L4-24GB",
            "gpu_count": 2,
            "plan_header": header,
            "resolved_parallelism": {"data_parallel_size": 2, "zero_stage": 3},
        },
        "resolved_parallelism": {"data_parallel_size": 2, "zero_stage": 3},
        "error": error,
    }
    (folder / "job.json").write_text(json.dumps(record))
    lines = list(header)
    for step in range(1, steps + 1):
        metric = {
            "step": step,
            "total_steps": total,
            "loss": round(3.0 * 0.9**step + 0.5, 4),
            "lr": 1e-4,  # an older release's name: the monitor reads it as learning_rate
            "grad_norm": 1.0,
            "tokens_per_s": 1000.0,
            "peak_mem_bytes": 1000,
        }
        if eval_steps and (step % eval_steps == 0 or step == total):
            metric["eval_loss"] = round(3.2 * 0.92**step + 0.6, 4)
        lines.append(json.dumps(metric))
    if error:
        lines += [error["summary"], PLAN_LINE, error["traceback"]]
    (folder / "log.txt").write_text("\n".join(lines) + "\n")
    return folder


DATA_ERROR = {
    "code": "DATA_ERROR",
    "attribution": "customer",
    "message": "sft.jsonl line 7: expected a JSON object with a 'text' field",
    "rank": 1,
    "node": 0,
    "local_rank": 1,
    "world_size": 2,
    "summary": "rank 1/2 (node 0, local_rank 1) failed: DataError: sft.jsonl line 7: expected "
    "a JSON object with a 'text' field",
    # A traceback as a release before the packages moved into veri_tui wrote it.
    "traceback": 'Traceback (most recent call last):\n  File "trainer/data.py", line 40, in '
    "load\ntrainer.errors.DataError: sft.jsonl line 7: expected a JSON object",
}


def write_big_model(folder: Path, layers: int = 28, hidden: int = 4096) -> Path:
    """A header-only 7B-class checkpoint (sparse file): too big for one L4 fully fine-tuned."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hidden * 3,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": layers,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "max_position_embeddings": 4096,
    }
    write_checkpoint(folder, config)
    return folder


async def editor_ready(pilot, timeout: float = 20.0) -> None:
    """Wait for the start screen to give way to the plan editor and its model read to end."""
    import asyncio
    import time

    from veri_tui.app.screens.plan_editor import PlanEditorScreen

    deadline = time.monotonic() + timeout
    while True:
        screen = pilot.app.screen
        if isinstance(screen, PlanEditorScreen):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            if screen.info is not None or "headers..." not in str(
                screen.query_one("#model-line").render()
            ):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"the plan editor was not ready within {timeout} s")
        await asyncio.sleep(0.02)


async def settle(pilot) -> None:
    """Let the workers finish and the frames they cause be drawn (the charts come one frame
    after the plan: widgets/plan_view.py)."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


async def until(pilot, condition, what: str, polls: int = 400) -> None:
    """Let the app run until ``condition()`` holds (a bound on polls, not a timed check)."""
    for _ in range(polls):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never saw: {what}")


async def pilot_wait(pilot, cond, timeout: float, what: str) -> None:
    """Poll ``cond`` every 0.2 s of the app's time until true; fail naming ``what``."""
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.2)


async def type_into(pilot, selector: str, text: str) -> None:
    """Replace the text of the screen's Input ``selector`` by typing ``text`` key by key."""
    from textual.widgets import Input

    inp = pilot.app.screen.query_one(selector, Input)
    inp.focus()
    inp.value = ""
    await pilot.press(*text)
    await pilot.pause()
