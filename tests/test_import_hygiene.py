"""The planning core and `veri-tui plan` load neither torch nor textual (checked in a fresh
interpreter, so other tests' imports cannot hide a leak)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "textual", "transformers", "paramiko")
CHECK = "import json, sys; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"


def _loaded(code: str) -> list[str]:
    script = f"{code}\n{CHECK.format(heavy=HEAVY)}"
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
