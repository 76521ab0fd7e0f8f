"""The app in a browser: `veri-tui serve` (textual-serve behind a token; see server.py, auth.py).

Imported only by `veri-tui serve` and `veri_tui.notebook.app()`: aiohttp and textual-serve
stay out of the terminal app, `veri-tui plan` and the planning core.
"""
