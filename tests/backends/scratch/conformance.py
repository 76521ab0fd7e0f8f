"""How the conformance suite (tests/backends) reaches the `scratch` backend: its plugin
installed for the module's tests (`site/` on sys.path, as a distribution's files would be,
and the registry told to look again), a job's destination a scratch folder of the test's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SITE = str(Path(__file__).resolve().parent / "site")


def target(
    request: pytest.FixtureRequest, root: Path
) -> tuple[Any, dict[str, str], Any, Callable[[], None]]:
    """(where, environment, cluster, teardown): the plugin installed until teardown."""
    from veri_tui.launch import backends

    sys.path.insert(0, SITE)
    backends.forget()
    from veri_tui_backends.scratch import Scratch

    def teardown() -> None:
        sys.path.remove(SITE)
        backends.forget()

    return Scratch(str(root / "scratch")), {}, None, teardown
