"""The opening plan line, planned by a helper process while the app starts.

Before the editor can show a plan, this process must import the planning core (pydantic
and its models, ~150 ms on a small machine) and compose ~140 widgets, all after Textual
itself has started: the first frame with a plan came at 2.9x a bare Textual app's first
frame (docs/app.md). The plan of the job the app opens on needs none of that UI, so
`spawn()` starts a helper Python (`main()` below) before Textual is even imported: on a
second core it plans the same job (`load_job_config` + `read_model_info` + `plan_job`, the
core's own functions, as `veri-tui plan` does) while this process starts Textual, and
prints one JSON line. The start screen shows that plan line, then the editor (its module
imported meanwhile here) takes over and plans the same job itself.

The helper never blocks anything, and this process plans the same job too, in the worker
that imports the editor's module (`plan_answer`): the start screen shows whichever answer
comes first: beside an idle core, the helper's; otherwise this process's, and the helper
is stopped. With every core busy it is not started at all (`idle_core`); VERI_FIRST_PLAN=1
always starts it, 0 never.

Both answers are remembered (`remember`) in `$VERI_HOME/cache/first-plan.json`, keyed by what
the opening plan line depends on: the model argument, the size and mtime of each file in the
model's folder, and of each planning-core source file. A later start whose key matches shows
that line in its first frame (`cached`: a few stat calls, no import of the core) and starts no
helper; the editor then plans the job itself as always, so a line the key failed to cover is
replaced within the editor's start. VERI_FIRST_PLAN=0 turns the cache off too.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from veri_tui.bundled import bundled_model
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import veri_home

ENV = "VERI_FIRST_PLAN"
# `-c`, not `-m veri_tui.app.first_plan`: the package imports this module itself.
HELPER = "import sys; from veri_tui.app.first_plan import main; main(sys.argv[1:])"


# The bundled model's folder from veri_tui.bundled, not veri_tui.plan.model_sources (importing
# veri_tui.plan loads the whole planning core).
_BUNDLED = bundled_model()
# The code the opening plan depends on (hashed into the cache key below).
_PACKAGE = Path(__file__).resolve().parents[1]
CACHE_NAME = "first-plan.json"


def _stats(folder: Path, pattern: str) -> list[str]:
    """`name size mtime_ns` of each file in ``folder`` matching ``pattern``, sorted."""
    rows = []
    for path in sorted(folder.glob(pattern)):
        st = path.stat()
        rows.append(f"{path.name} {st.st_size} {st.st_mtime_ns}")
    return rows


def cache_key(model: str | None) -> str | None:
    """What the opening plan line depends on, hashed; None when it cannot be told by stat
    alone (a Hub id or a path that is not a folder here)."""
    folder = Path(model).expanduser() if model else _BUNDLED
    if not folder.is_dir():
        return None
    parts = [model or "", str(folder.resolve()), *_stats(folder, "*")]
    # The core and the job folder's package it imports (record keys, LoRA targets).
    parts += _stats(_PACKAGE / "plan", "*.py") + _stats(_PACKAGE / "jobfolder", "*.py")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _cache_path() -> Path:
    return veri_home() / "cache" / CACHE_NAME


def cached(model: str | None) -> dict[str, str] | None:
    """The answer remembered for this opening job when its key still matches, else None."""
    if os.environ.get(ENV, "") == "0":
        return None
    try:
        key = cache_key(model)
        saved = json.loads(_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if key is None or not isinstance(saved, dict) or saved.get("key") != key:
        return None
    answer = saved.get("answer")
    return answer if isinstance(answer, dict) and "plan_line" in answer else None


def remember(model: str | None, answer: dict[str, str]) -> None:
    """Keep a planned answer for the next start (nothing on any failure: only a speed-up)."""
    if os.environ.get(ENV, "") == "0" or "plan_line" not in answer:
        return
    try:
        key = cache_key(model)
        if key is not None:
            _cache_path().parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(_cache_path(), {"key": key, "answer": answer})
    except OSError:
        pass


def idle_core() -> bool:
    """A core to spare: the 1-minute load average is below the core count minus one.

    The helper only helps beside an idle core; on a machine whose cores are all busy it
    takes CPU from this process's own start (measured: docs/app.md)."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1) - 1
    except OSError:
        return False


def spawn(model: str | None) -> subprocess.Popen[str] | None:
    """Start the helper (None when switched off, no core is idle, or it cannot start).

    VERI_FIRST_PLAN=1 always starts it, 0 never; unset, only beside an idle core."""
    mode = os.environ.get(ENV, "")
    if mode == "0" or (mode != "1" and not idle_core()):
        return None
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": os.environ.get(
        "PYDANTIC_DISABLE_PLUGINS", "__all__")}  # fmt: skip
    try:
        return subprocess.Popen(
            [sys.executable, "-c", HELPER, *([model] if model else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
    except OSError:
        return None


def result(proc: subprocess.Popen[str], timeout: float = 5.0) -> dict[str, str] | None:
    """The helper's answer ({"model_line", "plan_line"}), None on any failure; it is ended."""
    try:
        out, _ = proc.communicate(timeout=timeout)
        answer = json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
        proc.kill()
        proc.wait()
        return None
    return answer if isinstance(answer, dict) and "plan_line" in answer else None


def plan_answer(model: str | None) -> dict[str, str]:
    """The opening job's model line and plan line ({"error": ...} if the core refuses it)."""
    from veri_tui.errors import VeriError
    from veri_tui.plan import load_job_config, plan_job, read_model_info

    try:
        job = load_job_config(None, model=model)
        info = read_model_info(job.model)
        rec = plan_job(job, info, count_tokens=False)
    except VeriError as exc:
        return {"error": str(exc)}
    label = job.model or "tiny-model (bundled)"
    return {
        "model_line": f"model {label}: {info.parameter_count:,} parameters",
        "plan_line": rec.plan_line,
    }


def main(argv: list[str]) -> int:
    """The helper: plan the opening job, print one JSON line, leave without teardown."""
    import gc

    gc.disable()  # a short-lived process: the collector would only cost time
    answer = plan_answer(argv[0] if argv else None)
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    os._exit(0)
