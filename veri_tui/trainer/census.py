"""Bytes alive op by op on CPU, where no allocator counts them: a TorchDispatchMode census.

Every storage an op creates while the census is active is registered (with a weak
reference, so it is seen to be freed); after each op the storages alive are noted, so the
peak of any stretch of ops is known, less storages named afterwards (gradients, known only
once backward made them). Parameters, and whatever existed before it was entered, are not
counted; a DTensor counts as its local shard (the mode sees a sharded tensor's op before
its local op runs: the shard is this rank's memory, not the wrapper's global size). The
canary measures its CPU terms with it (veri_tui/trainer/canary.py), the tests and benchmarks what a
step keeps for backward (tests/support/saved_bytes.py). Temporaries inside one kernel are
not seen (they never reach Python).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Any, cast

import torch
from torch.distributed.tensor import DTensor
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


# torch leaves StorageWeakRef unannotated: the two calls this module makes, typed.
_weak_ref = cast(Callable[[torch.UntypedStorage], StorageWeakRef], StorageWeakRef)


def _expired(ref: StorageWeakRef) -> bool:
    return cast(Callable[[], bool], ref.expired)()


# TorchDispatchMode's __init_subclass__ and __init__ are unannotated in torch: subclassing
# and super().__init__() are untyped calls mypy cannot be shown otherwise.
class Census(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Bytes alive, op by op, of the storages created while it is active.

    `mark(name)` records the bytes alive at that moment; `peak` is the largest seen after any
    op, `excluding` the storages named later (the parameters' gradients), see `result`."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        # storage key -> (weak reference, bytes, serial). A freed storage's key (its
        # address) can come back for a new one, so the timeline names serials, not keys.
        self.live: dict[int, tuple[StorageWeakRef, int, int]] = {}
        self.excluded = {_key(t) for t in exclude}
        self.timeline: list[tuple[int, ...]] = []  # the live serials after each op
        self.sizes: list[int] = []  # bytes, by serial
        self.marks: dict[str, int] = {}

    def _sweep(self) -> None:
        dead = [k for k, (ref, _, _) in self.live.items() if _expired(ref)]
        for k in dead:
            del self.live[k]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._sweep()
        for t in tree_leaves(out):
            if isinstance(t, DTensor):  # a wrapper: its shard is what this rank holds
                t = t._local_tensor
            if isinstance(t, torch.Tensor):
                key = _key(t)
                if key not in self.live and key not in self.excluded:
                    st = t.untyped_storage()
                    self.live[key] = (_weak_ref(st), st.nbytes(), len(self.sizes))
                    self.sizes.append(st.nbytes())
        self.timeline.append(tuple(serial for _, _, serial in self.live.values()))
        return out

    def alive(self, without: AbstractSet[int] = frozenset()) -> int:
        """Bytes alive now, less the storages in `without`."""
        self._sweep()
        return sum(n for k, (_, n, _) in self.live.items() if k not in without)

    def mark(self, name: str) -> None:
        """Record the bytes alive now under `name`."""
        self.marks[name] = self.alive()

    def index(self) -> int:
        """Where the timeline is now: `peak(since=...)` looks only at the ops after it."""
        return len(self.timeline)

    def peak(self, without: Iterable[torch.Tensor | None] = (), since: int = 0) -> int:
        """The most bytes alive after any op (from op ``since`` on), less the storages of
        `without` (gradients: known only once backward made them)."""
        self._sweep()
        keys = {_key(t) for t in without if t is not None}
        drop = {serial for k, (_, _, serial) in self.live.items() if k in keys}
        stretch = self.timeline[since:]
        return max((sum(self.sizes[s] for s in live if s not in drop) for live in stretch),
                   default=0)  # fmt: skip
