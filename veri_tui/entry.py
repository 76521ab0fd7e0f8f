"""The `veri-tui` process entry: the console script and `python -m veri_tui` come through `run()`.

`veri_tui.cli.main` is pure (callable in-process: it leaves the collector, the environment
and the process as it found them). This module owns the process, and alone decides the
trims that make `veri-tui plan` start and leave quickly (benchmarks/bench_plan.py, target at
most 2.0x `python -c "import pydantic"`):

- PYDANTIC_DISABLE_PLUGINS defaults to `__all__` (a value the user set is kept): veri-tui
  uses no pydantic plugins, and without it the first model class built scans the entry
  points of every installed distribution for them.
- the cyclic garbage collector is paused for start-up: it runs dozens of times while
  pydantic and typing build their objects and frees nothing (~7 ms). It is back on before
  any command but a local `plan` runs (the app and the launchers run long).
- a local `plan` flushes its output and leaves with os._exit, skipping the interpreter's
  teardown that frees those objects one by one (~20 ms), but only when nothing touched the
  network: after a Hub lookup or an SSH connection the process ends the usual way, so
  clients close their connections and finish their threads and files.
"""

from __future__ import annotations

import gc
import os
import sys

PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"
# What network use loads: the Hub client, SSH, and ssl or http.client under any HTTP client.
# Not `socket`: pydantic's plugin loader brings it (importlib.metadata imports email.utils).
# A local plan loads none of these; tests/plan/test_entry.py checks both ways.
NETWORK_MODULES = ("huggingface_hub", "paramiko", "ssl", "http.client")


def network_touched() -> bool:
    """True when this process may have used the network (a module that can is loaded)."""
    return any(name in sys.modules for name in NETWORK_MODULES)


def leave_now(code: int) -> None:
    """Flush the output and exit without the interpreter's teardown (os._exit)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = 0  # `veri-tui plan | head`: the reader left; as cli.dispatch treats it
    except OSError as exc:
        print(f"error: output: {exc.strerror}", file=sys.stderr)
        code = code or 1
    sys.stderr.flush()
    os._exit(code)


def run() -> int:
    """The CLI, owning this process; returns the exit status (unless it leaves at once)."""
    gc.disable()  # start-up only: see the module docstring
    os.environ.setdefault(PLUGINS_ENV, "__all__")
    from veri_tui import cli

    args = cli.parse_args(sys.argv[1:])
    # Hosts named in a veri.toml show only once the command reads it: for those the
    # collector stays paused, and the network check below still keeps the usual exit.
    local_plan = args.command == "plan" and not args.host
    if not local_plan:
        gc.enable()
    code = cli.dispatch(args)
    if local_plan and not network_touched():
        leave_now(code)
    gc.enable()
    return code
