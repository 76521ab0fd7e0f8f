"""Resolve what the user typed after `--host` into a concrete SSH destination.

Two forms are accepted: an alias from the OpenSSH client config (`~/.ssh/config`, or
`$VERI_SSH_CONFIG`, or a path given by the caller) and a literal `user@host[:port]`.
paramiko parses the config but applies nothing and does not implement `Include`, so the
`Include` lines are expanded here (globs, relative paths taken from the config file's folder,
which is `~/.ssh` for the default file, as OpenSSH does) before paramiko sees the text. As in
OpenSSH, the lines after an `Include` belong to the block the `Include` stood in, not to the
included file's last `Host`: that block's header is repeated after the included text (`Host *`
at the top level). One difference remains: OpenSSH applies an included file's own `Host`
blocks only when the enclosing block matches too; here they apply on their own.
"""

from __future__ import annotations

import getpass
import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from veri_tui.errors import VeriError

#: OpenSSH refuses deeper nesting too; stops an Include cycle from looping forever.
MAX_INCLUDE_DEPTH = 16

_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+)$", re.IGNORECASE)
_BLOCK = re.compile(r"^\s*(?:host|match)(?:\s*=\s*|\s+)\S", re.IGNORECASE | re.MULTILINE)
_USER_HOST = re.compile(
    r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d+))?$"
)


@dataclass(frozen=True)
class HostSpec:
    """One hop's connection facts after the config was applied."""

    alias: str
    hostname: str
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    identity_files: tuple[str, ...] = ()
    proxy_jump: tuple[str, ...] = ()
    proxy_command: str | None = None
    known_hosts: str | None = None
    connect_timeout: float | None = None
    identities_only: bool = False


def default_config_path() -> Path:
    """`$VERI_SSH_CONFIG` when set (tests point it at their own file), else ~/.ssh/config."""
    return Path(os.environ.get("VERI_SSH_CONFIG") or Path.home() / ".ssh" / "config")


def expand_includes(path: Path, base: Path | None = None, depth: int = 0) -> str:
    """The config text with every `Include` line replaced by the files it names, in order."""
    if depth > MAX_INCLUDE_DEPTH:
        raise VeriError(f"Include nested deeper than {MAX_INCLUDE_DEPTH} (a cycle?)", key=str(path))
    base = base or path.parent
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise VeriError(f"not UTF-8 text ({exc.reason}); fix or remove it", key=str(path)) from exc
    except OSError as exc:
        raise VeriError(f"cannot read ({exc.strerror}); check the path", key=str(path)) from exc
    out: list[str] = []
    block = "Host *"  # the block the current line is in: the top level until a Host/Match
    for line in text.splitlines():
        match = _INCLUDE.match(line)
        if not match:
            if _BLOCK.match(line):
                block = line
            out.append(line)
            continue
        for pattern in match.group(1).split():
            pattern = os.path.expanduser(pattern.strip('"'))
            if not os.path.isabs(pattern):
                pattern = str(base / pattern)
            # OpenSSH includes matches in lexical order and ignores patterns matching nothing.
            for found in sorted(glob.glob(pattern)):
                if os.path.isfile(found):
                    included = expand_includes(Path(found), base, depth + 1)
                    out.append(included)
                    if _BLOCK.search(included):
                        out.append(block)  # back in the Include's own block
    return "\n".join(out)


def load_config(path: Path | None = None) -> paramiko.SSHConfig:
    """The parsed client config with Includes expanded; an empty config if the file is absent."""
    path = path or default_config_path()
    if not path.exists():
        return paramiko.SSHConfig()
    return paramiko.SSHConfig.from_text(expand_includes(path))


def _split_user_host(text: str) -> tuple[str | None, str, int | None]:
    match = _USER_HOST.match(text.strip())
    if not match:
        raise VeriError(
            f"{text!r} is neither a ~/.ssh/config alias nor user@host[:port]", key="host"
        )
    host = match.group("host").strip("[]")
    port = int(match.group("port")) if match.group("port") else None
    return match.group("user"), host, port


def resolve_host(
    target: str, config_path: Path | None = None, *, known_hosts: str | None = None
) -> HostSpec:
    """Apply the client config to `target` (an alias or `user@host[:port]`).

    A literal user or port in `target` wins over the config, as with `ssh -p`/`user@`.
    """
    config = load_config(config_path)
    user, host, port = _split_user_host(target)
    opts = config.lookup(host)
    if opts.get("proxycommand", "").lower() == "none":
        opts.pop("proxycommand")
    jumps = opts.get("proxyjump", "")
    try:
        cfg_port = int(opts.get("port", 22))
        timeout = float(opts["connecttimeout"]) if "connecttimeout" in opts else None
    except ValueError as exc:
        raise VeriError(f"bad Port or ConnectTimeout for {host}: {exc}", key="host") from exc
    files = opts.get("userknownhostsfile", "").split()
    return HostSpec(
        alias=target,
        hostname=opts.get("hostname", host),
        port=port or cfg_port,
        user=user or opts.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in opts.get("identityfile", [])),
        proxy_jump=tuple(j for j in jumps.split(",") if j and jumps.lower() != "none"),
        proxy_command=opts.get("proxycommand"),
        # The caller's file, then $VERI_KNOWN_HOSTS, then the config's, then ~/.ssh/known_hosts.
        known_hosts=known_hosts
        or os.environ.get("VERI_KNOWN_HOSTS")
        or (os.path.expanduser(files[0]) if files else None),
        connect_timeout=timeout,
        identities_only=opts.get("identitiesonly", "no").lower() == "yes",
    )
