"""Process start to first rendered frame: veri-tui's app against a bare Textual app.

Each run starts a fresh Python process that builds the app and runs it headless and prints
a marker line when Textual hands its first frame to the driver. The parent times from
spawning the process to reading the marker: interpreter start, imports, composing and the
first frame. veri-tui paints a light start screen first, shows the opening plan line a
helper process planned meanwhile, then builds the plan editor: its first frame with a plan
line and the editor's first frame with its own plan are timed too. Runs alternate between
the two apps; medians are reported. veri-tui is timed twice per round: cold (no remembered
opening plan: the first start, or one after the model or the planning core changed) and warm
(the answer the cold start remembered in $VERI_HOME/cache, veri_tui/app/first_plan.py).
(The keystroke latency: bench_app_keys.py.)

    python benchmarks/bench_app_start.py [--runs 9]

Targets (issues 5 and 20): veri-tui's first frame, and its first frame with a plan, within
1.5x of the bare app's first frame. Results go into docs/app.md by hand, with the machine
they were measured on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Both children mark frames where Textual hands them to the terminal driver (App._display),
# so each mark is printed at that moment, not when the event loop next gets round to a
# handler. Headless: the frame is built, the terminal write is skipped. FRAME: the first
# frame; PLAN: the first frame whose screen shows a plan line (`#plan-line` starting
# `plan: dp=`; veri-tui's start screen shows the helper's, docs/app.md); EDITOR: the first
# frame of the plan editor with its own plan line.
PRELUDE = """
import asyncio, sys
from textual.app import App

_display = App._display
SEEN = set()
def _mark(word):
    if word not in SEEN:
        SEEN.add(word)
        print(word, flush=True)

def _first_frame(self, screen, renderable):
    result = _display(self, screen, renderable)
    if renderable is not None:
        _mark("FRAME")
        line = screen.query("#plan-line")
        if line and str(line.first().render()).startswith("plan: dp="):
            _mark("PLAN")
            if type(screen).__name__ == "PlanEditorScreen":
                _mark("EDITOR")
    return result
App._display = _first_frame

async def until(word):
    while word not in SEEN:
        await asyncio.sleep(0.002)
"""

BARE = (
    PRELUDE
    + """
from textual.widgets import Footer, Header, Static

class Bare(App):
    def compose(self):
        yield Header()
        yield Static("hello")
        yield Footer()

async def pilot(p):
    await until("FRAME")
    p.app.exit()

Bare().run(headless=True, size=(120, 40), auto_pilot=pilot)
"""
)

# create_app first, as `veri-tui` runs it (veri_tui.cli -> run_app): the opening plan's helper
# is started before Textual is imported; the prelude's marks are put in place afterwards.
VERI = (
    """
from veri_tui.app import create_app

app = create_app()
"""
    + PRELUDE
    + """

async def pilot(p):
    await asyncio.wait_for(until("EDITOR"), 60)
    print("TORCH" if "torch" in sys.modules else "NOTORCH", flush=True)
    p.app.exit()

app.run(headless=True, size=(120, 40), auto_pilot=pilot)
"""
)


def one_run(code: str, env: dict[str, str]) -> dict[str, float | str]:
    """Seconds from spawn to each marker line the child prints."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    marks: dict[str, float | str] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        word = line.strip()
        if word in ("FRAME", "PLAN", "EDITOR"):
            marks[word] = time.perf_counter() - start
        elif word in ("TORCH", "NOTORCH"):
            marks["torch"] = word
    err = proc.stderr.read() if proc.stderr else ""
    if proc.wait() != 0 or "FRAME" not in marks:
        raise SystemExit(f"benchmark child failed:\n{err}")
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, VERI_HOME=home, HF_HUB_OFFLINE="1")
        one_run(BARE, env)  # warm the OS file cache for both before timing
        one_run(VERI, env)
        cache = Path(home) / "cache" / "first-plan.json"
        bare: list[float] = []
        marks: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
        torch_seen = False
        for _ in range(args.runs):
            bare.append(float(one_run(BARE, env)["FRAME"]))
            for kind in ("cold", "warm"):
                if kind == "cold":
                    cache.unlink(missing_ok=True)
                got = one_run(VERI, env)
                for word in ("FRAME", "PLAN", "EDITOR"):
                    value = float(got.get(word, float("nan")))
                    marks[kind].setdefault(word, []).append(value)
                torch_seen |= got.get("torch") == "TORCH"
    b = statistics.median(bare)
    print(f"runs: {args.runs} each, alternating; python {sys.version.split()[0]}")
    print(f"bare Textual app, first frame:             {b * 1000:7.0f} ms (median)")
    for kind in ("cold", "warm"):
        for word, what in (("FRAME", "first frame"), ("PLAN", "first frame with a plan"),
                           ("EDITOR", "the editor with its plan")):  # fmt: skip
            m = statistics.median(marks[kind][word])
            label = f"veri-tui {kind}, {what}:"
            print(f"{label:42} {m * 1000:7.0f} ms (median)  ratio {m / b:.2f}x")
    print(f"torch imported by the app: {'YES' if torch_seen else 'no'}")
    for kind in ("cold", "warm"):
        v, p = (statistics.median(marks[kind][w]) for w in ("FRAME", "PLAN"))
        print(f"target ({kind}): first frame <= 1.5x bare:", "met" if v <= 1.5 * b else "NOT met")
        print(f"target ({kind}): first frame with a plan <= 1.5x bare:",
              "met" if p <= 1.5 * b else "NOT met")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
