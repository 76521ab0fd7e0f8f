"""What runs on the GPU machine needs nothing that is not there or carried.

The GPU image has torch, transformers (with its own requirements), peft and safetensors, and
no veri-tui, pydantic, textual or paramiko (docs/gpu-check.md). The check's own
process, its model builds, the supervisor and the ranks import the trainer, jobfolder and
benchmarks/gpu_check{,_run,_device,_files,_jobs,_kernels,_out,_report}.py from the carried
tree. Every import statement in those (function bodies included) must name the standard
library, the image's packages, the carried code, or an optional package imported inside a
function whose absence the caller handles (bitsandbytes: a carried wheel, QLoRA only; pynvml: else
nvidia-smi; datasets: only for a parquet, CSV, save_to_disk or Hub dataset, else one
DataError line; the trackers: only when `report_to` names them, else one ConfigError line).
`ABSENT` makes those four missing for real in a process (test_gpu_check_cpu.py's SIGTERM run
starts the check itself under it).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEVICE_SIDE = [
    *sorted((REPO / "veri_tui" / "trainer").rglob("*.py")),
    *sorted((REPO / "veri_tui" / "jobfolder").rglob("*.py")),
    *(REPO / "benchmarks" / f"{n}.py" for n in ("gpu_check", "gpu_check_run", "gpu_check_device",
                                                 "gpu_check_files", "gpu_check_jobs",
                                                 "gpu_check_kernels", "gpu_check_out",
                                                 "gpu_check_report")),
]  # fmt: skip
# transformers requires huggingface_hub and tokenizers: they come with it.
IMAGE = {"torch", "transformers", "peft", "safetensors", "huggingface_hub", "tokenizers"}
# veri_tui's own __init__ imports nothing; of its packages only these two are the device's.
CARRIED = {"veri_tui.trainer", "veri_tui.jobfolder", "gpu_check_run", "gpu_check_device",
           "gpu_check_files", "gpu_check_jobs", "gpu_check_kernels", "gpu_check_out",
           "gpu_check_report"}  # fmt: skip
OPTIONAL = {"bitsandbytes", "pynvml", "datasets", "trackio", "wandb", "mlflow"}
# Imported by gpu_check.py only to prepare or rehearse (where veri-tui is installed): never on
# the GPU box once DIR holds plan.json (the run's path, which the SIGTERM test takes under
# ABSENT).
PREPARE_ONLY = {"gpu_check_features", "gpu_check_prepare", "gpu_check_wheels",
                "gpu_check_rehearse"}  # fmt: skip
NOT_ON_THE_IMAGE = ("veri_tui.plan", "veri_tui.launch", "veri_tui.app", "pydantic", "textual",
                    "paramiko")  # fmt: skip

#: A sitecustomize.py that makes NOT_ON_THE_IMAGE unimportable in a process and its children
#: that keep its PYTHONPATH.
ABSENT = f"""import sys

class _NotOnTheImage:
    def find_spec(self, name, path=None, target=None):
        if any(name == m or name.startswith(m + ".") for m in {NOT_ON_THE_IMAGE!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU image)")
        return None

sys.meta_path.insert(0, _NotOnTheImage())
"""


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(package, inside a function) for every absolute import in the file: the top-level
    name, or `veri_tui.<part>` inside veri_tui."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, bool]] = []

    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == "veri_tui" else parts[0]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((package(a.name), in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((package(child.module), in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def test_the_device_side_imports_only_the_image_and_the_carried_code() -> None:
    allowed = set(sys.stdlib_module_names) | IMAGE | CARRIED
    wrong, top_level_optional = [], []
    for path in DEVICE_SIDE:
        for name, in_function in _imports(path):
            where = str(path.relative_to(REPO))
            if name in OPTIONAL:
                if not in_function:
                    top_level_optional.append(f"{where}: {name}")
            elif name in PREPARE_ONLY and where == "benchmarks/gpu_check.py" and in_function:
                continue
            elif name not in allowed:
                wrong.append(f"{where}: {name}")
    assert wrong == [], "not on the GPU image and not carried: " + ", ".join(wrong)
    assert top_level_optional == [], "optional packages imported at module level"


def test_the_absent_hook_hides_what_the_image_lacks(tmp_path: Path) -> None:
    """The hook the SIGTERM run uses does hide those packages (else that run shows nothing)."""
    (tmp_path / "sitecustomize.py").write_text(ABSENT)
    code = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError:\n"
        "        print(m)\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    args = [sys.executable, "-c", code, *NOT_ON_THE_IMAGE, "veri_tui.jobfolder.contract.atomic"]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True, timeout=60)
    assert out.stdout.split() == list(NOT_ON_THE_IMAGE)
