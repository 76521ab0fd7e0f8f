"""The process entry (veri_tui/entry.py) and a pure `cli.main`.

`cli.main` called in-process leaves the collector, the environment and the process as it
found them; the entry's trims (plugins default off, collector paused, os._exit after a
local plan that touched no network) change nothing a user sees. Each check runs in a fresh
interpreter, since the trims act on the process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from veri_tui import cli
from veri_tui.plan import plan
from veri_tui.plan.model_sources import bundled_tiny_model

# Printed by an atexit hook: present when the interpreter tore down as usual, absent after
# the entry's os._exit (which runs no atexit hooks).
TEARDOWN = "teardown ran"


def _python(
    code: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter with `env` added and the `drop` variables removed."""
    full = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full
    )


def _entry(
    *argv: str, before: str = "", env: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """The entry's run() as the console script calls it, with an atexit marker and `before`
    (setup code) ahead of it."""
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print({TEARDOWN!r}, file=sys.stderr))\n"
        f"{before}"
        f"sys.argv = ['veri-tui', *{list(argv)!r}]\n"
        "from veri_tui.entry import run\n"
        "raise SystemExit(run())\n"
    )
    return _python(code, env, drop)


def _veri(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m veri_tui ...`, the same entry as the console script."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *argv], capture_output=True, text=True, timeout=60
    )


PURE = """
import gc, json, os, sys
import veri_tui.cli as c
argv = json.loads(sys.argv[1])
if os.environ.get("GC_OFF"):
    gc.disable()
gc.set_threshold(123, 4, 5)
env = dict(os.environ)
state = (gc.isenabled(), gc.get_threshold())
code = c.main(argv)
assert type(code) is int, code
assert (gc.isenabled(), gc.get_threshold()) == state, (gc.isenabled(), gc.get_threshold())
assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
sys.stdout.flush()
print("still running", code, file=sys.stderr)
"""


@pytest.mark.parametrize("gc_off", ["", "1"])
@pytest.mark.parametrize("argv", [["plan"], ["plan", "--json"], ["jobs"]])
def test_cli_main_leaves_the_process_as_it_was(argv: list[str], gc_off: str, tmp_path: Path):
    # PYDANTIC_DISABLE_PLUGINS unset: main must not set it (only the entry does).
    env = {**os.environ, "VERI_HOME": str(tmp_path), "GC_OFF": gc_off}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    proc = subprocess.run(
        [sys.executable, "-c", PURE, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "still running 0\n"
    if argv[0] == "plan":
        assert "plan: dp=1" in proc.stdout


def test_the_entry_defaults_pydantic_plugins_off_and_keeps_a_users_value(tmp_path: Path):
    show = "import os\natexit.register(lambda: print(os.environ.get('PYDANTIC_DISABLE_PLUGINS')))\n"
    home = {"VERI_HOME": str(tmp_path)}
    unset = _entry("jobs", before=show, env=home, drop=("PYDANTIC_DISABLE_PLUGINS",))
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.splitlines()[-1] == "__all__"
    kept = _entry("jobs", before=show, env={**home, "PYDANTIC_DISABLE_PLUGINS": "some_plugin"})
    assert kept.stdout.splitlines()[-1] == "some_plugin"


def test_other_commands_run_with_the_collector_on(tmp_path: Path) -> None:
    spy = (
        "import gc\nimport veri_tui.commands.jobs as jobs\n_run = jobs.run\n"
        "def spy(args):\n    print('collector on:', gc.isenabled())\n    return _run(args)\n"
        "jobs.run = spy\n"
    )
    proc = _entry("jobs", "--json", before=spy, env={"VERI_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "collector on: True"
    assert proc.stderr == f"{TEARDOWN}\n"


def _in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What `cli.main(argv)` prints in this interpreter (status 0)."""
    capsys.readouterr()
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_local_plan_leaves_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    proc = _entry("plan", "--gpu-count", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no teardown: os._exit after the flush
    assert proc.stdout == _in_process(capsys, "plan", "--gpu-count", "2")


def _cache(root: Path, repo_id: str) -> None:
    """The bundled tiny model as a snapshot of `repo_id` in an HF hub cache at `root`."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    shutil.copytree(bundled_tiny_model(), repo / "snapshots" / "0123abcd")


def test_a_hub_id_from_the_local_cache_is_not_network(tmp_path: Path) -> None:
    _cache(tmp_path / "hub", "org/tiny")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = _entry("plan", "--model", "org/tiny", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["model"]["source"] == "org/tiny"


# A stand-in for the Hub client, first on PYTHONPATH (no network here): it serves the
# bundled tiny model's header and config as the Hub would. Any use of huggingface_hub is
# network use to the entry.
FAKE_HUB = '''
"""Test stand-in for huggingface_hub: the bundled tiny model served as a Hub repo."""
import json, struct
from pathlib import Path
from types import SimpleNamespace as NS
from veri_tui.plan.model_sources import bundled_tiny_model
TINY = bundled_tiny_model()
CALLS = []

def get_safetensors_metadata(repo_id):
    CALLS.append(repo_id)
    raw = (TINY / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    header.pop("__metadata__", None)
    tensors = {k: NS(dtype=v["dtype"], shape=v["shape"], data_offsets=v["data_offsets"])
               for k, v in header.items()}
    return NS(files_metadata={"model.safetensors": NS(tensors=tensors)})

def hf_hub_download(repo_id, filename):
    return str(TINY / filename)
'''


def test_no_quick_exit_after_a_hub_lookup(tmp_path: Path) -> None:
    pkg = tmp_path / "fake" / "huggingface_hub"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_HUB)
    (pkg / "errors.py").write_text('"""Stand-in."""\nclass HfHubHTTPError(Exception):\n    pass\n')
    path = os.pathsep.join([str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")])
    env = {"HF_HUB_CACHE": str(tmp_path / "empty"), "PYTHONPATH": path}
    env["HF_HUB_OFFLINE"] = "0"
    check = "import huggingface_hub\nassert huggingface_hub.CALLS == ['org/remote']\n"
    before = f"atexit.register(lambda: exec({check!r}))\n"
    proc = _entry("plan", "--model", "org/remote", "--json", before=before, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"{TEARDOWN}\n"  # the interpreter ended as usual
    assert json.loads(proc.stdout)["model"]["source"] == "org/remote"


def test_a_refused_hub_lookup_is_one_line_and_ends_as_usual(tmp_path: Path) -> None:
    # The real client against a closed local port (HF_ENDPOINT): no network leaves the box.
    env = {"HF_HUB_CACHE": str(tmp_path / "empty"), "HF_ENDPOINT": "http://127.0.0.1:1"}
    env["HF_HUB_OFFLINE"] = "0"
    proc = _entry("plan", "--model", "org/remote", env=env)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: model: org/remote: cannot reach the Hub (")
    assert lines[1:] == [TEARDOWN]


@pytest.mark.parametrize("where", ["flag", "veri.toml"])
def test_no_quick_exit_after_ssh(tmp_path: Path, where: str) -> None:
    # Nothing listens on port 1: the connection is refused at once, after paramiko started.
    (tmp_path / "ssh_config").write_text("")
    env = {
        "VERI_SSH_CONFIG": str(tmp_path / "ssh_config"),
        "VERI_KNOWN_HOSTS": str(tmp_path / "known_hosts"),
    }
    (tmp_path / "veri.toml").write_text('hosts = ["127.0.0.1:1"]\n')
    argv = ["--host", "127.0.0.1:1"] if where == "flag" else [str(tmp_path / "veri.toml")]
    proc = _entry("plan", *argv, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: host: ") and "cannot connect" in lines[0]
    assert lines[1:] == [TEARDOWN]


def test_plan_output_is_complete_through_the_entry(capsys: pytest.CaptureFixture[str]) -> None:
    # A local plan leaves with os._exit: everything must be flushed first.
    proc = _veri("plan", "--gpu-count", "2", "--set", "lora_rank=8", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    record = plan(gpu_count=2, lora_rank=8).to_dict()
    assert json.loads(proc.stdout) == json.loads(json.dumps(record))
    text = _veri("plan", "--gpu-count", "2", "--set", "lora_rank=8")
    assert text.returncode == 0
    assert text.stdout == _in_process(capsys, "plan", "--gpu-count", "2", "--set", "lora_rank=8")


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
