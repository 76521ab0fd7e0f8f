"""The one user-facing error type shared by the core, the launcher and the CLI.

Every refusal names the key (or file) it is about and the way out, so the CLI can print
`error: <key>: <message>` per problem and exit 2 without a traceback, and the app can put
each message beside its field.
"""

from __future__ import annotations

from typing import NamedTuple


class ConfigError(NamedTuple):
    """One problem with the user's input: the key or file it concerns and what to do.

    A NamedTuple rather than a dataclass: as cheap to define as a tuple, which every
    `veri-tui plan` start-up pays (benchmarks/bench_plan.py)."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class VeriError(Exception):
    """Raised for bad user input; carries every problem found, not just the first."""

    def __init__(self, errors: list[ConfigError] | ConfigError | str, key: str = "") -> None:
        if isinstance(errors, str):
            errors = [ConfigError(key or "input", errors)]
        elif isinstance(errors, ConfigError):
            errors = [errors]
        self.errors: list[ConfigError] = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    def lines(self) -> list[str]:
        """The CLI form: one `error: <key>: <message>` line per problem."""
        return [f"error: {e}" for e in self.errors]
