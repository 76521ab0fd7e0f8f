"""The app never imports torch: started in a fresh process, driven through its screens."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import asyncio, sys
from veri_tui.app import create_app

async def pilot(p):
    app = p.app
    for _ in range(400):
        # query, not query_one: a screen just switched to has no children yet
        lines = app.screen.query("#plan-line")
        ready = type(app.screen).__name__ == "PlanEditorScreen"
        if ready and lines and str(lines.first().render()).startswith("plan: dp="):
            break
        await asyncio.sleep(0.01)
    else:
        raise SystemExit("no plan shown")
    for key in ("ctrl+l", "escape", "ctrl+o", "escape", "ctrl+b"):
        await p.press(key)
        await app.workers.wait_for_complete()
        await p.pause()
    print("torch" in sys.modules, "textual" in sys.modules, flush=True)
    app.exit()

create_app().run(headless=True, size=(100, 30), auto_pilot=pilot)
"""


@pytest.mark.timeout(60)
def test_app_process_never_imports_torch(veri_home: Path) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=50)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"], out.stdout + out.stderr[-2000:]
