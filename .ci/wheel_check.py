"""CI's installed-package check (run by .ci/wheel.sh from outside the repository).

With veri-tui installed from its wheel (no `-e`, no checkout on sys.path): the bundled model
and datasets are found as package data, `veri-tui plan` plans the bundled tiny model, the app's
first frame shows the opening plan line, and a tiny local job (2 CPU processes) succeeds.
Exits non-zero, naming the step, on the first thing that does not hold.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fail(step: str, detail: str) -> None:
    sys.exit(f"wheel check: {step}: {detail}")


def check_installed_not_checkout() -> Path:
    import veri_tui
    from veri_tui.bundled import assets_dir

    where = Path(veri_tui.__file__).resolve()
    if "site-packages" not in where.parts:
        fail("import", f"veri_tui imported from {where}, not from the installed wheel")
    if not (assets_dir() / "tiny-model" / "model.safetensors").is_file():
        fail("assets", f"no bundled tiny model under {assets_dir()}")
    return assets_dir()


def check_one_namespace() -> None:
    """The wheel installs one top-level package, veri_tui (the trainer and the job folder's
    package inside it): no generic `trainer` or `jobfolder` lands in site-packages."""
    from importlib.metadata import distribution

    files = distribution("veri-tui").files or []
    tops = sorted({f.parts[0] for f in files if f.suffix == ".py"})
    if tops != ["veri_tui"]:
        fail("namespace", f"the wheel installs top-level packages {tops}, not only veri_tui")
    print("wheel check: one top-level package:", tops[0])


def check_plan() -> None:
    out = subprocess.run(["veri-tui", "plan"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0 or "plan: dp=1 " not in out.stdout:
        fail("veri-tui plan", f"exit {out.returncode}: {out.stdout[-400:]}{out.stderr[-400:]}")
    line = next(li for li in out.stdout.splitlines() if "plan: dp=" in li)
    print("wheel check: veri-tui plan:", line)


async def first_frame() -> str:
    from veri_tui.app import create_app
    from veri_tui.app.screens.plan_editor import PlanEditorScreen

    async with create_app().run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = pilot.app.screen
            if isinstance(screen, PlanEditorScreen):
                await pilot.app.workers.wait_for_complete()
                await pilot.pause()
                line = str(screen.query_one("#plan-line").render())
                if line.startswith("plan: "):
                    return line
            await asyncio.sleep(0.05)
    fail("app", "the plan editor showed no plan line within 60 s")
    return ""


def check_job(assets: Path) -> None:
    job = assets / "examples" / "sft-tiny.toml"
    out = subprocess.run(
        ["veri-tui", "launch", str(job), "--wait"], capture_output=True, text=True, timeout=600
    )
    if out.returncode != 0:
        fail("veri-tui launch", f"exit {out.returncode}: {out.stdout[-800:]}{out.stderr[-800:]}")
    print("wheel check: veri-tui launch sft-tiny.toml --wait: succeeded")


def main() -> None:
    os.environ["VERI_HOME"] = tempfile.mkdtemp(prefix="veri-wheel-home-")
    os.environ["VERI_FIRST_PLAN"] = "0"
    assets = check_installed_not_checkout()
    check_one_namespace()
    check_plan()
    print("wheel check: the app's first frame:", asyncio.run(first_frame()))
    check_job(assets)


if __name__ == "__main__":
    main()
