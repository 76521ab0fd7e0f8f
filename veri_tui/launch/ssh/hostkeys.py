"""Host key checking against known_hosts: refuse unknown and changed keys, record trust.

An unknown host is refused by its name (the alias given, and the known_hosts entry it
would get) with its SHA256 fingerprint and the way to trust it (`--trust-host
FINGERPRINT`, repeatable: several hosts unknown at once are refused together, in one
error naming each, so they are trusted in one rerun); the exception type carries host and
fingerprint so the app can ask instead. Trust is only accepted for exactly a fingerprint
the server presents, and is then appended to known_hosts (`[host]:port` form off port 22);
a key not among the fingerprints given is still an unknown key, not a "changed" one. A
changed key (known_hosts has another) is always refused.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import paramiko

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.atomic import write_bytes_atomic


def known_hosts_path(explicit: str | None = None) -> Path:
    """The file to check and record in: the caller's, `$VERI_KNOWN_HOSTS`, or the user's."""
    chosen = explicit or os.environ.get("VERI_KNOWN_HOSTS")
    return Path(chosen) if chosen else Path.home() / ".ssh" / "known_hosts"


def trusted_set(trusted: str | None) -> set[str]:
    """The fingerprints given (`--trust-host`, repeatable, joined by spaces on the way)."""
    return set((trusted or "").replace(",", " ").split())


def shown(alias: str | None, host: str) -> str:
    """`n1 ([127.0.0.1]:2222)`: the name the user typed, then the known_hosts entry."""
    return f"{alias} ({host})" if alias and alias != host else host


class UnknownHostKeyError(VeriError):
    """The server's key is not in known_hosts; `host` and `fingerprint` let the app ask."""

    def __init__(
        self,
        host: str,
        fingerprint: str,
        key_type: str,
        known_hosts: Path,
        alias: str | None = None,
        given: str | None = None,
    ) -> None:
        self.host = host
        self.alias = alias or host
        self.fingerprint = fingerprint
        self.key_type = key_type
        self.known_hosts = known_hosts
        other = f", not one given with --trust-host ({given})" if given else ""
        super().__init__(
            Refusal(
                "host",
                f"{shown(alias, host)} is not in {known_hosts}; its {key_type} key fingerprint "
                f"is {fingerprint}{other}. If that is the host you expect, rerun with "
                f"--trust-host {fingerprint}",
            )
        )


class UnknownHostKeysError(UnknownHostKeyError):
    """Several hosts' keys are unknown: one refusal naming each, one rerun trusting all.
    `host`/`fingerprint` are the first's (the app asks about them in turn)."""

    def __init__(self, each: list[UnknownHostKeyError]) -> None:
        first = each[0]
        self.each = each
        self.host, self.alias, self.fingerprint = first.host, first.alias, first.fingerprint
        self.key_type, self.known_hosts = first.key_type, first.known_hosts
        rerun = " ".join(f"--trust-host {e.fingerprint}" for e in each)
        VeriError.__init__(self, [
            *(Refusal("host", f"{shown(e.alias, e.host)} is not in {e.known_hosts}; its "
                              f"{e.key_type} key fingerprint is {e.fingerprint}")
              for e in each),
            Refusal("trust_host", f"if those are the hosts you expect, rerun with {rerun}"),
        ])  # fmt: skip


class ChangedHostKeyError(VeriError):
    """The server's key differs from the recorded one: possible interception, never accepted."""

    def __init__(self, host: str, expected: str, got: str, known_hosts: Path) -> None:
        self.host = host
        self.expected = expected
        self.got = got
        super().__init__(
            Refusal(
                "host",
                f"the host key of {host} CHANGED (known_hosts has {expected}, the server sent "
                f"{got}); refusing to connect. If the host was really reinstalled, remove the "
                f"old entry with: ssh-keygen -R '{host}' -f {known_hosts}",
            )
        )


class TrustPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko calls this only for hosts absent from known_hosts."""

    def __init__(self, known_hosts: Path, trusted: str | None, alias: str | None = None) -> None:
        self.known_hosts = known_hosts
        self.trusted = trusted_set(trusted)
        self.alias = alias

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        got = key.fingerprint  # OpenSSH's `SHA256:...` form (paramiko 3.2+)
        if got not in self.trusted:
            given = ", ".join(sorted(self.trusted)) or None
            raise UnknownHostKeyError(hostname, got, key.get_name(), self.known_hosts,
                                      self.alias, given)  # fmt: skip
        record_host_key(self.known_hosts, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)


#: Hosts are opened in parallel threads (a multi-node job): one read-append-rename at a time,
#: or two hosts trusted in one run would each write the file without the other's line.
_RECORDING = threading.Lock()


def record_host_key(path: Path, hostname: str, key: paramiko.PKey) -> None:
    """Append `hostname keytype base64` to known_hosts, written aside and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n".encode()
    with _RECORDING:
        old = path.read_bytes() if path.exists() else b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        # Keep the file's mode (ssh wants 0600 or 0644); a new one is private.
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
        write_bytes_atomic(path, old + line, mode)


def load_known_hosts(client: paramiko.SSHClient, path: Path) -> None:
    """Load the file into the client, naming the file and line on a parse failure."""
    if not path.exists():
        return
    try:
        client.load_host_keys(str(path))
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise VeriError(f"cannot read known_hosts: {exc}; fix or move it", key=str(path)) from exc


def changed_key_error(exc: paramiko.BadHostKeyException, known_hosts: Path) -> ChangedHostKeyError:
    """Turn paramiko's exception into the user-facing refusal."""
    return ChangedHostKeyError(
        exc.hostname, exc.expected_key.fingerprint, exc.key.fingerprint, known_hosts
    )
