"""Headless subcommands of `veri-tui`: one module per command, each exposing `run(args)`."""
