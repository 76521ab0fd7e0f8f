"""Allows `python -m veri_tui`, the same as the `veri-tui` console script."""

from veri_tui.entry import run

raise SystemExit(run())
