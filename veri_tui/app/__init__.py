"""The Textual app: `create_app` (used by the CLI, pilot tests and snapshots) and `run_app`.

Importing this package stays cheap: Textual and the screens load inside `create_app`, and
nothing in the app ever imports torch (a test checks it in a subprocess).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from veri_tui.app import first_plan

if TYPE_CHECKING:
    from veri_tui.app.app import VeriApp


def create_app(
    *,
    veri_home: str | Path | None = None,
    model: str | None = None,
    workdir: str | Path | None = None,
    theme: str = "textual-dark",
) -> VeriApp:
    """The one app factory. `veri_home` also becomes $VERI_HOME for the launch facade."""
    if veri_home is not None:
        os.environ["VERI_HOME"] = str(veri_home)
    # The answer the last start planned for this job, when nothing it depends on changed;
    # else a helper, started before Textual is imported, plans it on another core meanwhile.
    remembered = first_plan.cached(model)
    helper = None if remembered else first_plan.spawn(model)
    from veri_tui.app.app import VeriApp
    from veri_tui.jobfolder.contract.layout import veri_home as home_now

    home = home_now()
    return VeriApp(
        veri_home=home,
        model=model,
        workdir=Path(workdir) if workdir else None,
        theme=theme,
        first_plan=helper,
        remembered=remembered,
    )


def run_app(model: str | None = None) -> int:
    """Run the app in the terminal (plain `veri-tui`, or `veri-tui --model X` on a model);
    returns the exit status."""
    result = create_app(model=model).run()
    return int(result or 0)
