"""The host-key dialog: an unknown SSH host's SHA256 fingerprint, trusted or refused.

The launch screen opens it when a preflight or a launch meets a host that is not in
known_hosts; trust is given for exactly that fingerprint (the SSH module records it in
known_hosts). A changed key is never offered here: the SSH module refuses it outright.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class HostKeyScreen(ModalScreen[bool]):
    """Dismisses with True when the user trusts `fingerprint` for `host`."""

    BINDINGS = [
        Binding("y", "trust", "Trust"),
        Binding("n,escape", "refuse", "Refuse"),
    ]

    def __init__(self, host: str, fingerprint: str) -> None:
        super().__init__()
        self.host = host
        self.fingerprint = fingerprint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(f"Unknown host {self.host}", classes="dialog-title", markup=False)
            yield Static(
                f"Its key fingerprint is\n  {self.fingerprint}\n"
                "Compare it with the host's own `ssh-keygen -lf` output. Trust it and "
                "record it in known_hosts?",
                markup=False,
            )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Trust (y)", id="trust", variant="warning")
                yield Button("Refuse (n)", id="refuse")

    def action_trust(self) -> None:
        self.dismiss(True)

    def action_refuse(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "trust")


def host_key_of(exc: BaseException) -> tuple[str, str] | None:
    """(host, fingerprint) when `exc` is the SSH module's unknown-host-key refusal."""
    host, fp = getattr(exc, "host", None), getattr(exc, "fingerprint", None)
    return (str(host), str(fp)) if host and fp else None


class TrustAsker:
    """A screen's side of the trust dialog: the fingerprints accepted (`trusted` per host,
    `accepted` the last one), passed on to the launcher as `trust_host`."""

    host: str | None
    app: App[object]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.trusted: dict[str, str] = {}  # host -> fingerprint the user accepted
        self.accepted: str | None = None  # the last fingerprint accepted for several hosts

    def _trust(self, hosts: list[str]) -> str | None:
        """The fingerprint to pass on: the one accepted for this host; with several hosts,
        the last one accepted (it is recorded in known_hosts before the preflight, so each
        unknown host is asked about once, in turn)."""
        if len(hosts) == 1:
            return self.trusted.get(hosts[0])
        if self.accepted is not None:
            from veri_tui.launch import jobs

            jobs.trust_key(hosts, self.accepted)  # recorded by the host whose key it is
            self.accepted = None
        return None

    def _ask_trust(self, host: str, fingerprint: str, then: Callable[[], None]) -> None:
        def answered(trust: bool | None) -> None:
            if trust:
                self.trusted[self.host or host] = fingerprint
                self.accepted = fingerprint
                then()

        self.app.push_screen(HostKeyScreen(host, fingerprint), answered)
