"""The one user-facing error type shared by the core, the launcher and the CLI.

Every refusal names the key (or file) it is about and the way out, so the CLI can print
`error: <key>: <message>` per problem and exit 2 without a traceback, and the app can put
each message beside its field. What went wrong outside the user's input has a subclass a
caller tells apart by type, never by key: `NotFoundError` (no such job, or its record gone
or unreadable), `UnreachableError` (a host that cannot be reached or dropped), and the SSH
side's `UnknownHostKeyError` (veri_tui/launch/ssh/hostkeys.py: a host key to trust first).
"""

from __future__ import annotations

from typing import NamedTuple


class Refusal(NamedTuple):
    """One refusal of the user's input: the key or file it concerns and what to do.

    Printed as one `error: <key>: <message>` line. (Not the trainer's `ConfigError`, the exception a
    rank raises with code CONFIG_ERROR: that one lives in veri_tui/jobfolder/contract/errors.py.)

    A NamedTuple rather than a dataclass: as cheap to define as a tuple, which every
    `veri-tui plan` start-up pays (benchmarks/bench_plan.py)."""

    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class VeriError(Exception):
    """Raised for bad user input; carries every problem found, not just the first."""

    def __init__(self, errors: list[Refusal] | Refusal | str, key: str = "") -> None:
        if isinstance(errors, str):
            errors = [Refusal(key or "input", errors)]
        elif isinstance(errors, Refusal):
            errors = [errors]
        self.errors: list[Refusal] = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    def lines(self) -> list[str]:
        """The CLI form: one `error: <key>: <message>` line per problem."""
        return [f"error: {e}" for e in self.errors]


class NotFoundError(VeriError):
    """No job by that id here, or its job record gone from (or unreadable on) its host."""

    def __init__(self, message: str, key: str = "job") -> None:
        super().__init__(message, key=key)


class UnreachableError(VeriError):
    """A host that cannot be reached: its name, the connection, authentication, a drop."""

    def __init__(self, message: str, key: str = "host") -> None:
        super().__init__(message, key=key)
