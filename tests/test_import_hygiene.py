"""The planning core and `veri-tui plan` load neither torch nor textual (checked in a fresh
interpreter, so other tests' imports cannot hide a leak)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "textual", "transformers", "paramiko")
# The notebook and browser side (issue 20): loaded only when asked for, never by the core.
WEB = ("veri_tui.notebook", "veri_tui.web", "aiohttp", "textual_serve", "jinja2", "IPython")
CHECK = "import json, sys; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"


def _loaded(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    script = f"{code}\n{CHECK.format(heavy=heavy)}"
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_core_import_is_light() -> None:
    assert _loaded("import veri_tui.plan") == []


@pytest.mark.timeout(60)
def test_plan_command_is_light() -> None:
    code = (
        "import contextlib, io\n"
        "from veri_tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plan', '--gpu-count', '2', '--set', 'lora_rank=8', '--json']) == 0\n"
    )
    assert _loaded(code) == []


def test_core_and_plan_command_load_nothing_of_the_notebook_or_web_side() -> None:
    assert _loaded("import veri_tui.plan", WEB) == []
    code = (
        "import contextlib, io\n"
        "from veri_tui.cli import main\n"
        "from veri_tui.plan import plan\n"
        "rec = plan(gpu_count=2)\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plan', '--gpu-count', '2']) == 0\n"
    )
    assert _loaded(code, WEB) == []
    # A record shown as HTML (a notebook) brings the renderer, still not the web server.
    html = _loaded("from veri_tui.plan import plan\nplan()._repr_html_()", WEB)
    assert html == ["veri_tui.notebook"]
