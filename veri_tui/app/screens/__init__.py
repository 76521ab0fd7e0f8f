"""Screens of the veri-tui app: each composes widgets and routes their messages."""
