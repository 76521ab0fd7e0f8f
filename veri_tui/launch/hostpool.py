"""Hosts by name, and one call per host at once.

`open_hosts`: None is this machine, a `SlurmOptions` a Slurm login node (slurm/host.py),
anything else an SSH destination (paramiko is imported only when an SSH host is asked for:
`veri-tui plan`, `jobs` and the app start without it).
`in_parallel`: every node of a job is asked at once, each on its own thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from veri_tui.launch.host import Host
from veri_tui.launch.slurm.options import SlurmOptions

#: How a caller names a job's host: None (this machine), an SSH destination, a Slurm login.
HostName = str | SlurmOptions | None

T = TypeVar("T")
R = TypeVar("R")


def in_parallel(call: Callable[[T], R], items: list[T]) -> list[R | Exception]:
    """`call(item)` for every item on its own thread; results (or the exception) in order."""

    def safe(item: T) -> R | Exception:
        try:
            return call(item)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller, per item
            return exc

    with ThreadPoolExecutor(max_workers=max(len(items), 1)) as pool:
        return list(pool.map(safe, items))


def all_or_raise(results: list[R | Exception]) -> list[R]:
    """The results, or the first exception among them raised."""
    for item in results:
        if isinstance(item, Exception):
            raise item
    return [r for r in results if not isinstance(r, Exception)]


def open_hosts(names: Sequence[HostName], trust: str | None = None) -> list[Host]:
    """A host per name, connected in parallel: None is this machine, a name an SSH host
    (alias or user@host[:port]), `SlurmOptions` its login node (a Slurm job is one host:
    its allocation's nodes are the scheduler's). A host that cannot be reached raises
    VeriError (the first), and the ones already open are closed."""
    if len(names) == 1 and isinstance(names[0], SlurmOptions):
        from veri_tui.launch.slurm.host import open_slurm

        return [open_slurm(names[0], trust)]
    if all(n is None for n in names):
        from veri_tui.launch.local_host import LocalHost

        return [LocalHost() for _ in names]
    from veri_tui.launch.ssh.host import SshHost

    opened = in_parallel(lambda n: SshHost.open(str(n), trust=trust), list(names))
    hosts: list[Host] = [h for h in opened if not isinstance(h, Exception)]
    failed = [e for e in opened if isinstance(e, Exception)]
    if failed:
        for host in hosts:
            host.close()
        raise _first_failure(failed)
    return hosts


def _first_failure(failed: list[Exception]) -> Exception:
    """What to raise for hosts that could not be opened: the first failure that is not an
    unknown key; else every unknown key together, so that one rerun trusts them all."""
    from veri_tui.launch.ssh.hostkeys import UnknownHostKeyError, UnknownHostKeysError

    unknown = [e for e in failed if isinstance(e, UnknownHostKeyError)]
    other = [e for e in failed if not isinstance(e, UnknownHostKeyError)]
    if other or len(unknown) == 1:
        return (other or unknown)[0]
    return UnknownHostKeysError(unknown)
