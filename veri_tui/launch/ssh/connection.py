"""One SSH connection (through ProxyJump hops or a ProxyCommand), with timeouts everywhere.

Remote commands are only ever built from argument lists (`shlex.join`), so no user string is
interpreted by the remote shell. Every read carries a deadline, and `probe()` opens a session
with a timeout: keepalive alone does not notice a frozen server (field notes), a probe does.
"""

from __future__ import annotations

import select
import shlex
import time
from pathlib import Path

import paramiko

from veri_tui.errors import UnreachableError, VeriError
from veri_tui.launch.machine import Result
from veri_tui.launch.ssh.hostkeys import (
    TrustPolicy,
    changed_key_error,
    known_hosts_path,
    load_known_hosts,
)
from veri_tui.launch.ssh.hosts import HostSpec, resolve_host

DEFAULT_TIMEOUT = 10.0
#: How long a finished command's streams may take to reach their EOF after its exit status.
EOF_GRACE_S = 2.0


class ConnectionLost(UnreachableError):
    """The connection dropped or stopped answering; callers may `reconnect()` and retry."""

    def __init__(self, host: str, what: str) -> None:
        super().__init__(f"connection to {host} lost ({what}); retry when it is reachable")


def exited(conn: Connection, chan: paramiko.Channel) -> bool:
    """True when the remote command really ended (an exit status arrived, connection alive).

    paramiko sets `status_event` on a channel closed by a dying connection too, with
    `exit_status` left at -1, so the event alone cannot tell "ended" from "dropped".
    """
    return chan.exit_status != -1 and conn.transport.is_active()


def command_line(argv: list[str]) -> str:
    """The only way a remote command is built: every argument quoted, nothing interpreted."""
    if not argv:
        raise ValueError("empty command")
    return shlex.join(str(a) for a in argv)


def _connect_error(exc: BaseException, spec: HostSpec, kh: Path, timeout: float) -> BaseException:
    """The one-line VeriError for a failed connect (other exceptions pass through)."""
    where = f"{spec.user}@{spec.hostname}:{spec.port}"
    if isinstance(exc, VeriError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return changed_key_error(exc, kh)
    # "No authentication methods available" is paramiko's way to say it found no key at all.
    if isinstance(exc, paramiko.AuthenticationException) or "authentication methods" in str(exc):
        tried = ", ".join(spec.identity_files) or "the agent and ~/.ssh/id_*"
        return UnreachableError(
            f"{where}: authentication failed ({exc}); tried {tried}. Add an IdentityFile "
            "for this host in ~/.ssh/config or load the key into ssh-agent"
        )
    if isinstance(exc, TimeoutError):
        return UnreachableError(f"{where}: timed out after {timeout:g} s; is it reachable?")
    if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
        return UnreachableError(f"{where}: cannot connect ({exc or type(exc).__name__})")
    return exc


def _open_client(spec: HostSpec, sock: paramiko.ProxyCommand | paramiko.Channel | None,
                 trust: str | None, timeout: float) -> paramiko.SSHClient:  # fmt: skip
    """Authenticate one hop; paramiko's failures become one-line VeriErrors."""
    kh = known_hosts_path(spec.known_hosts)
    client = paramiko.SSHClient()
    load_known_hosts(client, kh)
    client.set_missing_host_key_policy(TrustPolicy(kh, trust, spec.alias))
    try:
        client.connect(
            spec.hostname,
            spec.port,
            username=spec.user,
            sock=sock,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            # paramiko takes a list of files too (its docs); its stubs say one.
            key_filename=list(spec.identity_files) or None,  # type: ignore[arg-type]
            look_for_keys=not spec.identity_files,
            allow_agent=not spec.identities_only,
        )
    except BaseException as exc:
        client.close()
        raise _connect_error(exc, spec, kh, timeout) from exc
    return client


class Connection:
    """A connected target host; `reconnect()` rebuilds the whole chain after a drop."""

    def __init__(
        self,
        spec: HostSpec,
        *,
        trust: str | None = None,
        timeout: float | None = None,
        config_path: Path | None = None,
    ) -> None:
        self.spec = spec
        self.trust = trust
        self.timeout = timeout or spec.connect_timeout or DEFAULT_TIMEOUT
        self.config_path = config_path
        self._clients: list[paramiko.SSHClient] = []
        self._sftp: paramiko.SFTPClient | None = None

    @classmethod
    def open(
        cls,
        host: str,
        *,
        trust: str | None = None,
        config_path: Path | None = None,
        known_hosts: str | None = None,
        timeout: float | None = None,
    ) -> Connection:
        """Resolve `host` (alias or user@host[:port]) and connect."""
        spec = resolve_host(host, config_path, known_hosts=known_hosts)
        conn = cls(spec, trust=trust, timeout=timeout, config_path=config_path)
        conn.connect()
        return conn

    def connect(self) -> None:
        """Connect through every ProxyJump hop (direct-tcpip channels) or the ProxyCommand."""
        self.close()
        hops = [
            resolve_host(j, self.config_path, known_hosts=self.spec.known_hosts)
            for j in self.spec.proxy_jump
        ]
        try:
            first = hops[0] if hops else self.spec
            sock: paramiko.ProxyCommand | paramiko.Channel | None = (
                paramiko.ProxyCommand(first.proxy_command) if first.proxy_command else None
            )
            for spec in [*hops, self.spec]:
                if self._clients:
                    sock = self._open_tunnel(spec)
                self._clients.append(_open_client(spec, sock, self.trust, self.timeout))
                sock = None
            self.transport.set_keepalive(15)
        except BaseException:
            self.close()
            raise

    def _open_tunnel(self, spec: HostSpec) -> paramiko.Channel:
        try:
            return self.transport.open_channel(
                "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0), timeout=self.timeout
            )
        except (paramiko.SSHException, OSError) as exc:
            raise VeriError(
                f"jump host cannot reach {spec.hostname}:{spec.port} ({exc})", key="host"
            ) from exc

    @property
    def transport(self) -> paramiko.Transport:
        transport = self._clients[-1].get_transport() if self._clients else None
        if transport is None:
            raise ConnectionLost(self.spec.alias, "not connected")
        return transport

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def reconnect(self) -> None:
        self.connect()

    def probe(self, timeout: float = 5.0) -> bool:
        """True if the server answers a session request within `timeout` seconds."""
        try:
            chan = self.transport.open_session(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError, ConnectionLost):
            return False
        chan.close()
        return True

    def sftp(self) -> paramiko.SFTPClient:
        """The SFTP session, opened once per connection; its reads carry the timeout."""
        if self._sftp is None:
            try:
                self._sftp = paramiko.SFTPClient.from_transport(self.transport)
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ConnectionLost(self.spec.alias, f"sftp: {exc}") from exc
            assert self._sftp is not None
            channel = self._sftp.get_channel()
            if channel is not None:
                channel.settimeout(max(self.timeout, 30.0))
        return self._sftp

    def exec_channel(self, line: str) -> paramiko.Channel:
        """Start `line` (built by `command_line` or from quoted pieces) on a new channel."""
        try:
            chan = self.transport.open_session(timeout=self.timeout)
            chan.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ConnectionLost(self.spec.alias, str(exc) or type(exc).__name__) from exc
        return chan

    def run(self, argv: list[str], *, timeout: float = 60.0, stdin: bytes | None = None) -> Result:
        """Run a command given as an argument list; reads stdout and stderr together."""
        return self.run_line(command_line(argv), timeout=timeout, stdin=stdin)

    def run_line(self, line: str, *, timeout: float = 60.0, stdin: bytes | None = None) -> Result:
        """Run an already quoted command line (callers build it from `shlex.quote` pieces)."""
        chan = self.exec_channel(line)
        try:
            if stdin is not None:
                chan.sendall(stdin)
            chan.shutdown_write()
            return self._collect(chan, time.monotonic() + timeout)
        finally:
            chan.close()

    def _collect(self, chan: paramiko.Channel, deadline: float) -> Result:
        out: list[bytes] = []
        err: list[bytes] = []
        # Drain both streams as data arrives: a full stderr window can stall stdout forever.
        status_at: float | None = None
        while True:
            while chan.recv_ready():
                out.append(chan.recv(65536))
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
            pending = chan.recv_ready() or chan.recv_stderr_ready()
            # sshd may send the exit status before the last bytes of a stream (a loaded box
            # once lost stderr's final newline): the streams end at the channel's EOF. A
            # command whose background child keeps the streams open never sends one, so the
            # EOF gets EOF_GRACE_S after the status. A closed channel also sets status_event:
            # only a received status counts.
            if chan.status_event.is_set() and status_at is None:
                status_at = time.monotonic()
            ended = chan.eof_received or chan.closed
            if (
                status_at is not None
                and not pending
                and (ended or time.monotonic() - status_at > EOF_GRACE_S)
            ):
                if not exited(self, chan) and not self.transport.is_active():
                    raise ConnectionLost(self.spec.alias, "the connection closed mid-command")
                return Result(chan.exit_status, b"".join(out), b"".join(err))
            if time.monotonic() > deadline:
                raise ConnectionLost(self.spec.alias, "no answer before the deadline")
            select.select([chan], [], [], 0.05 if status_at is not None else 0.2)
