"""The process entry (veri_tui/entry.py): what it trims from start-up and exit changes nothing
a user sees. Each check runs in a fresh interpreter, since the trims act on the process."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from veri_tui import cli
from veri_tui.plan import plan

ONE_MODEL = (
    "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int = 1\nassert A(x='2').x == 2\n"
)


def _python(code: str, env: dict[str, str] | None = None) -> str:
    """Run `code` in a fresh interpreter; its last stdout line."""
    full = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=full
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _veri(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m veri_tui ...`, the same entry as the console script."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *argv], capture_output=True, text=True, timeout=60
    )


def test_plugins_off_skips_importlib_metadata() -> None:
    # What the interpreter loads by itself (a site hook may import it): the baseline.
    before = _python("import sys; print('importlib.metadata' in sys.modules)")
    code = (
        "import os, sys\n"
        "os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)\n"
        "from veri_tui.entry import quiet_pydantic_plugins\n"
        "assert quiet_pydantic_plugins()\n"
        f"{ONE_MODEL}"
        "assert os.environ['PYDANTIC_DISABLE_PLUGINS'] == '__all__'\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    assert _python(code) == before


def test_a_users_plugin_setting_is_kept() -> None:
    # PYDANTIC_DISABLE_PLUGINS set to a value that leaves plugins on: pydantic's own loader.
    code = (
        "import os, sys\n"
        "from veri_tui.entry import LOADER, quiet_pydantic_plugins\n"
        "assert not quiet_pydantic_plugins()\n"
        f"{ONE_MODEL}"
        "stand_in = getattr(sys.modules[LOADER], '_veri_stand_in', False)\n"
        "print(os.environ['PYDANTIC_DISABLE_PLUGINS'], stand_in,\n"
        "      'importlib.metadata' in sys.modules)\n"
    )
    out = _python(code, {"PYDANTIC_DISABLE_PLUGINS": "some_plugin"})
    assert out == "some_plugin False True"


def test_stand_in_hands_over_to_the_real_loader() -> None:
    code = (
        "import os, sys\n"
        "os.environ.pop('PYDANTIC_DISABLE_PLUGINS', None)\n"
        "from veri_tui.entry import LOADER, quiet_pydantic_plugins\n"
        "quiet_pydantic_plugins()\n"
        f"{ONE_MODEL}"
        "import pydantic.plugin._loader as stand_in\n"
        "assert stand_in.get_plugins() == ()\n"
        # A name only the real loader has: it is loaded, and takes the stand-in's place.
        "assert stand_in.PYDANTIC_ENTRY_POINT_GROUP == 'pydantic'\n"
        "real = sys.modules[LOADER]\n"
        "assert real is not stand_in and not getattr(real, '_veri_stand_in', False)\n"
        "assert 'importlib.metadata' in sys.modules\n"
        # Plugins turned back on later: the stand-in asks the real loader.
        "os.environ['PYDANTIC_DISABLE_PLUGINS'] = 'none_of_them'\n"
        "print(list(stand_in.get_plugins()) == list(real.get_plugins()))\n"
    )
    assert _python(code) == "True"


def test_plan_output_is_complete_through_the_entry(tmp_path: Path) -> None:
    # A local plan leaves with os._exit: everything must be flushed first.
    proc = _veri("plan", "--gpu-count", "2", "--set", "lora_rank=8", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    record = plan(gpu_count=2, lora_rank=8).to_dict()
    assert json.loads(proc.stdout) == json.loads(json.dumps(record))
    text = _veri("plan", "--gpu-count", "2")
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1].startswith("throughput: ")


def test_plan_errors_through_the_entry() -> None:
    proc = _veri("plan", "--set", "zero_stage=1", "--set", "gloabl_batch_size=3")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert [x.split(":")[1].strip() for x in lines] == ["gloabl_batch_size", "zero_stage"]
    assert "Traceback" not in proc.stderr


def test_help_lists_every_command_either_way() -> None:
    top = _veri("--help").stdout
    for name in cli.COMMANDS:
        assert name in top
    # Built for one command only, that command's help is the same as in the whole tree.
    for name in cli.COMMANDS:
        whole = _command_parser(cli.build_parser(), name)
        alone = _command_parser(cli.build_parser([name, "--json"]), name)
        assert alone.format_help() == whole.format_help()


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


@pytest.mark.parametrize("argv", [["jobs", "--json"], ["logs", "no-such-job"]])
def test_other_commands_collect_garbage_again(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    gc.disable()
    try:
        cli.main(argv, owns_process=True)
        assert gc.isenabled()
    finally:
        gc.enable()
    capsys.readouterr()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("argv", [["plan"], ["plan", "--json"], ["jobs"]])
def test_output_on_a_full_disk_is_one_line(argv: list[str], tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "veri_tui", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "VERI_HOME": str(tmp_path)},
        )
    assert proc.returncode == 1
    assert proc.stderr == "error: output: No space left on device\n"
