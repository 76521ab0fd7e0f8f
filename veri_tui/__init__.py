"""veri-tui: plan, launch and watch multi-GPU fine-tuning runs from a terminal.

The package splits into a pure planning core (`veri_tui.plan`), I/O without UI
(`veri_tui.launch`), the Textual app (`veri_tui.app`) and the `veri-tui` command line.
"""

__version__ = "0.1.0"
