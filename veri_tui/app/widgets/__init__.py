"""Widgets of the veri-tui app: one widget (and its messages) per module."""
