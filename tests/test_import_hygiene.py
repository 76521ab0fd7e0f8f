"""The planning core and `veri-tui plan` load neither torch nor textual (checked in a fresh
interpreter, so other tests' imports cannot hide a leak)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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


@pytest.mark.timeout(60)
def test_plan_command_loads_the_backend_registry_but_no_job_operation() -> None:
    """`plan` reads the backends' options (--host, --slurm) from the registry, but what only
    a job's operations need stays unloaded: the lost rule and the failure reading, gathering
    nodes, the thread pool (about a quarter of a plan's start-up, benchmarks/bench_plan.py)."""
    code = (
        "import contextlib, io\n"
        "from veri_tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plan', '--gpu-count', '2']) == 0\n"
    )
    ops = ("veri_tui.jobfolder.contract.lost", "veri_tui.jobfolder.failures.failures",
           "veri_tui.launch.gather", "veri_tui.launch.host", "concurrent.futures")  # fmt: skip
    assert _loaded(code, (*ops, "veri_tui.launch.backends.direct")) == [
        "veri_tui.launch.backends.direct"
    ]


@pytest.mark.timeout(60)
def test_a_jsonl_dataset_never_imports_datasets(tmp_path) -> None:
    """JSON Lines are read by the standard library (veri_tui/jobfolder/data/dataload.py): `datasets`
    (~1.4 s of imports) is loaded only for parquet, CSV and folders (issue 27)."""
    code = (
        "import contextlib, io, os\n"
        f"os.environ['VERI_HOME'] = {str(tmp_path)!r}\n"
        "from veri_tui.cli import main\n"
        "from veri_tui.launch.job_datasets import BUNDLED_DATASETS\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['plan', '--dataset', str(BUNDLED_DATASETS['sft_text'])]) == 0\n"
    )
    assert _loaded(code, ("datasets", "pyarrow", "pandas", *HEAVY)) == []


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
    # A record shown as HTML (a notebook) renders with the core's own stdlib renderer
    # (veri_tui.plan.html, issue 17: no plan -> notebook import), so nothing of the notebook
    # or web side loads; the renderer itself loads only then.
    html = _loaded("from veri_tui.plan import plan\nplan()._repr_html_()", (*WEB, *HEAVY))
    assert html == []
    assert _loaded("import veri_tui.plan", ("veri_tui.plan.html",)) == []


def test_the_job_folder_package_is_standard_library_only() -> None:
    """Every jobfolder module, imported in a fresh interpreter, loads nothing outside the
    standard library: it runs on GPU hosts beside the trainer (and before torch)."""
    code = (
        "import json, pkgutil, sys, importlib\n"
        "import veri_tui.jobfolder as jobfolder\n"
        "before = set(sys.modules)\n"
        "for m in pkgutil.walk_packages(jobfolder.__path__, 'veri_tui.jobfolder.'):\n"
        "    importlib.import_module(m.name)\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps(sorted(new - set(sys.stdlib_module_names) - {'veri_tui'})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_the_launcher_side_never_imports_the_trainer() -> None:
    """veri_tui reaches job folders through its jobfolder package, never the torch rank
    program (veri_tui.trainer, which only a job's processes import)."""
    root = Path(__file__).resolve().parents[1] / "veri_tui"
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(root / "trainer"):
            continue  # the trainer itself
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "veri_tui.trainer" or n.startswith("veri_tui.trainer.") for n in names):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert found == []
