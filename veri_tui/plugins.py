"""Where the backends are found: the built-in ones, one line each, and every plugin installed.

A backend is one package whose module holds `BACKEND`, an object of the Backend protocol
(veri_tui/launch/backends/api.py). The built-in ones are named below; another distribution
adds one by installing it as a module of the `veri_tui_backends` namespace package (a folder
`veri_tui_backends/<name>/` on sys.path, with no `__init__.py` of its own): its folder name is
the backend's name and its veri.toml table's. Found by listing those folders, nothing
imported: the backend registry (veri_tui/launch/backends) imports them, and the planner
(plan/config.py) leaves their `[<name>]` tables to the launch side without importing it.

Not entry points: `importlib.metadata`'s import alone took 170 ms here and reading every
installed distribution's entry points 2 to 14 ms more, against a whole `veri-tui plan` of
about 80 ms, whose parser holds every backend's options; a namespace costs one `stat` per
sys.path entry. Stdlib only, and nothing of veri_tui.
"""

from __future__ import annotations

import os
import sys

#: The built-in backends: their name and module (`direct` takes any destination no other
#: backend takes, so it is asked last: veri_tui/launch/backends).
BUILTIN = {
    "slurm": "veri_tui.launch.backends.slurm",
    "direct": "veri_tui.launch.backends.direct",
}
#: The namespace package plugins install their backend's package into.
NAMESPACE = "veri_tui_backends"


def backend_modules() -> dict[str, str]:
    """Every backend's name and module: the plugins found on sys.path (in path order, the
    first of a name winning, as an import would), then the built-in ones."""
    found: dict[str, str] = {}
    for entry in sys.path:
        folder = os.path.join(entry or ".", NAMESPACE)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.isidentifier() and os.path.isfile(os.path.join(folder, name, "__init__.py")):
                found.setdefault(name, f"{NAMESPACE}.{name}")
    return {**{k: v for k, v in found.items() if k not in BUILTIN}, **BUILTIN}
