"""One call per host at once: `in_parallel` asks every node of a job, each on its own
thread; `all_or_raise` hands back their answers or the first failure; `first_failure`:
what to raise when some hosts could not be opened.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def in_parallel(call: Callable[[T], R], items: list[T]) -> list[R | Exception]:
    """`call(item)` for every item on its own thread; results (or the exception) in order."""
    # Imported here: the backend registry (so this module) loads in every command's parser,
    # `veri-tui plan` included, and concurrent.futures with its logging costs it ~4 ms.
    from concurrent.futures import ThreadPoolExecutor

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


def first_failure(failed: list[Exception]) -> Exception:
    """What to raise for hosts that could not be opened: the first failure that is not an
    unknown key; else every unknown key together, so that one rerun trusts them all."""
    from veri_tui.launch.ssh.hostkeys import UnknownHostKeyError, UnknownHostKeysError

    unknown = [e for e in failed if isinstance(e, UnknownHostKeyError)]
    other = [e for e in failed if not isinstance(e, UnknownHostKeyError)]
    if other or len(unknown) == 1:
        return (other or unknown)[0]
    return UnknownHostKeysError(unknown)
