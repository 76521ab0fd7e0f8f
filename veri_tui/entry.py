"""The `veri-tui` process entry: start-up and exit trimmed for a command that plans and quits.

`veri-tui plan` is timed against `python -c "import pydantic"` (benchmarks/bench_plan.py,
target at most 2x), and a one-field pydantic model alone already costs about 2x. Three
costs in that are not the plan's own, and this module removes them for the process it
owns (`python -m veri_tui` and the console script come through `run()`; tests calling
`veri_tui.cli.main` in-process keep the interpreter's usual behaviour):

- pydantic's plugin loader imports importlib.metadata (with email, zipfile, csv, ...) at
  its top even when plugins are disabled: 13-20 ms. veri-tui uses no pydantic plugins, so
  PYDANTIC_DISABLE_PLUGINS defaults to `__all__` (a value the user set is kept) and, while
  that disables them, a stand-in loader answers "no plugins". It loads the real loader
  for anything else, and whenever the variable no longer disables plugins.
- the cyclic garbage collector runs dozens of times while pydantic and typing build their
  objects at import (~7 ms) and finds nothing to free; `cli.main` turns it back on for
  the app and every command except a local `plan`.
- interpreter teardown frees those objects one by one (~20 ms): a local `plan` flushes
  its output and leaves with os._exit (see `cli.main`).
"""

from __future__ import annotations

import gc
import os
import sys

# Not `from typing import TYPE_CHECKING`: importing typing (with re and enum) is ~10 ms that
# `run` would rather do with the collector paused. Type checkers read this name as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

LOADER = "pydantic.plugin._loader"
PLUGINS_OFF = ("__all__", "1", "true")  # the values pydantic's get_plugins treats as "none"
PLUGINS_ENV = "PYDANTIC_DISABLE_PLUGINS"


def _real_loader() -> ModuleType:
    """Pydantic's own plugin loader, executed now and put in place of the stand-in."""
    current = sys.modules.get(LOADER)
    if current is not None and not getattr(current, "_veri_stand_in", False):
        return current
    import importlib.machinery
    import importlib.util

    import pydantic.plugin

    spec = importlib.machinery.PathFinder.find_spec(LOADER, pydantic.plugin.__path__)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot find {LOADER}", name=LOADER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[LOADER] = module
    return module


def _get_plugins() -> Any:
    """No plugins while PYDANTIC_DISABLE_PLUGINS disables them all, as pydantic would say."""
    if os.environ.get(PLUGINS_ENV) in PLUGINS_OFF:
        return ()
    return _real_loader().get_plugins()


def _loader_getattr(name: str) -> Any:
    # The import system asks a module for dunders such as __path__ on every
    # `from ._loader import x`: a plain module has none, and asking the real loader would
    # import importlib.metadata after all. Any other name (one a newer pydantic reads
    # besides get_plugins) is the real loader's.
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return getattr(_real_loader(), name)


def quiet_pydantic_plugins() -> bool:
    """Default PYDANTIC_DISABLE_PLUGINS to `__all__`; when plugins end up disabled and
    pydantic has not loaded its plugin loader yet, register the stand-in. True if it did."""
    os.environ.setdefault(PLUGINS_ENV, "__all__")
    if os.environ[PLUGINS_ENV] not in PLUGINS_OFF or LOADER in sys.modules:
        return False
    from types import ModuleType

    stand_in = ModuleType(LOADER, "pydantic's plugin loader while plugins are disabled")
    stand_in.get_plugins = _get_plugins  # type: ignore[attr-defined]
    stand_in.__getattr__ = _loader_getattr  # type: ignore[method-assign]
    stand_in._veri_stand_in = True  # type: ignore[attr-defined]
    sys.modules[LOADER] = stand_in
    return True


def run() -> int:
    """The console script and `python -m veri_tui`: the CLI, owning this process."""
    gc.disable()
    quiet_pydantic_plugins()
    from veri_tui.cli import main

    return main(owns_process=True)
