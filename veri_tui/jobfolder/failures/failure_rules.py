"""The one table of failure rules: which error code a failure gets, and whether it only says
that a peer went away.

Both sides classify with it: a rank with the real exception in hand (veri_tui/trainer/report.py,
when it writes failures/rank-<r>.json) and the supervisor with only texts
(veri_tui/jobfolder/failures/failures.py: torch elastic's error.json, whose message is ``"<Type>:
<msg>"`` and whose traceback ends in the module-qualified ``torch.OutOfMemoryError: ...``).

``RULES`` is tried in order and the first rule that matches decides. Inside a rule, exception
types are matched first: by module-qualified class name, along the MRO when a real exception
is at hand (so subclasses count), exactly in a text. Then its patterns: regular expressions
over the message, case-insensitive and bounded by word edges ("xid" is not in "oxidation").

Only the job's own classes (veri_tui.jobfolder.contract.errors) claim customer codes by type: a bare
``ConfigError`` from some library, or a type name with no module, says nothing. Out of memory
comes before the peer rules, because NCCL reports an allocation failure inside a collective as
a ``DistBackendError`` whose text may also mention the communicator.

Stdlib only: the supervisor imports this (it never imports torch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from veri_tui.jobfolder.contract.errors import ConfigError, DataError, ModelLoadError, TrainerError
from veri_tui.jobfolder.contract.status import FailureCode


class Rule(NamedTuple):
    """One row of the table."""

    code: str | None  # None: the exception's own ``code`` (a TrainerError)
    peer: bool  # the failure only says that another rank went away
    types: tuple[str, ...]  # module-qualified class names
    patterns: tuple[str, ...]  # regex sources over the message (word-bounded, any case)


def qualified_name(cls: type) -> str:
    """``torch.OutOfMemoryError``; builtins keep their bare name, as tracebacks print them."""
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


#: What gloo, NCCL and c10d say on a rank whose *peer* died or stalled.
PEER_PHRASES = (
    "connection closed",
    "connection reset",
    "connection refused",
    "broken pipe",
    "timed out",
    "timeout",
    "socket closed",
    "remote process exited",
    "communicator was aborted",
    "ncclRemoteError",
    "read error",
    "unhandled system error",
    # Said by the job folder itself of a node a multi-node job's watcher ended because another
    # node failed (veri_tui/jobfolder/failures/failures.py peer_error).
    "another node failed",
)

#: The trainer's error classes with a fixed code; TrainerError itself carries one per instance.
_OWN_TYPES = (DataError, ModelLoadError, ConfigError)


def _own_names(cls: type) -> tuple[str, ...]:
    """The class's qualified name, and those older releases gave it
    (`veri_tui.jobfolder.contract.errors.X` before the packages moved into veri_tui,
    `trainer.errors.X` before the job-folder
    package): a traceback in an older job folder still names one of those."""
    return (qualified_name(cls), f"veri_tui.jobfolder.contract.errors.{cls.__qualname__}",
            f"trainer.errors.{cls.__qualname__}")  # fmt: skip


RULES: tuple[Rule, ...] = (
    Rule(None, False, _own_names(TrainerError), ()),
    *(Rule(cls("").code, False, _own_names(cls), ()) for cls in _OWN_TYPES),
    Rule(
        FailureCode.CUDA_OOM,
        False,
        ("torch.OutOfMemoryError",),
        ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED"),
    ),
    Rule(
        FailureCode.HARDWARE_ERROR,
        False,
        (),
        ("xid", "ecc error", "fallen off the bus", "nvlink error", "hardware error"),
    ),
    Rule(FailureCode.COMM_ERROR, True, (), PEER_PHRASES),
    # Any other c10d error (store, network, backend) is a communication failure too; the
    # peer phrases above come first so a message that names the cause is read before this.
    Rule(
        FailureCode.COMM_ERROR,
        True,
        tuple(
            f"torch.distributed.{n}"
            for n in ("DistError", "DistBackendError", "DistNetworkError", "DistStoreError")
        ),
        (),
    ),
)


def _compile(patterns: Sequence[str]) -> re.Pattern[str] | None:
    # Word edges by lookaround rather than \b, so a pattern may start or end with a non-word
    # character and still be bounded.
    if not patterns:
        return None
    return re.compile(rf"(?<!\w)(?:{'|'.join(patterns)})(?!\w)", re.IGNORECASE)


_COMPILED = tuple((rule, _compile(rule.patterns)) for rule in RULES)
UNKNOWN = (FailureCode.UNKNOWN, False)


def classify_exceptions(chain: Sequence[BaseException]) -> tuple[str, bool]:
    """(code, peer) for a rank's exception and its causes (report.py collects the chain)."""
    text = " ".join(str(e) for e in chain)
    for rule, pattern in _COMPILED:
        for exc in chain:
            if not any(qualified_name(c) in rule.types for c in type(exc).__mro__):
                continue
            if rule.code is not None:
                return rule.code, rule.peer
            code = getattr(exc, "code", FailureCode.UNKNOWN)
            # A TrainerError that wraps a peer's failure (a checkpoint save that failed
            # because a rank died) stays a peer failure.
            rest = [e for e in chain if not isinstance(e, TrainerError)]
            return code, bool(rest) and classify_exceptions(rest) == (code, True)
        if pattern is not None and pattern.search(text):
            return rule.code or FailureCode.UNKNOWN, rule.peer
    return UNKNOWN


def classify_text(type_name: str, message: str) -> tuple[str, bool]:
    """(code, peer) from an error text: ``type_name`` as qualified as the source knows it
    (a bare name matches no type rule), ``message`` the text after ``"<Type>: "``."""
    for rule, pattern in _COMPILED:
        if rule.code is not None and type_name in rule.types:
            return rule.code, rule.peer
        if pattern is not None and pattern.search(message):
            return rule.code or FailureCode.UNKNOWN, rule.peer
    return UNKNOWN


def is_peer_text(text: str) -> bool:
    """True when an error text only says that a peer went away or stalled."""
    return classify_text("", text)[1]


_TYPE_HEAD = re.compile(r"([A-Za-z_][\w.]*): ")


def split_type(text: str) -> tuple[str, str]:
    """'torch.OutOfMemoryError: CUDA out of ...' -> ('torch.OutOfMemoryError', 'CUDA out of ...');
    a text without a type head -> ('', text)."""
    m = _TYPE_HEAD.match(text)
    return (m.group(1), text[m.end() :]) if m else ("", text)


def qualify(type_name: str, traceback: str) -> str:
    """The module-qualified form of ``type_name`` as the traceback's exception line prints
    it (torch elastic's message carries only ``type(e).__name__``); unchanged when absent."""
    if not type_name or "." in type_name:
        return type_name
    line = re.compile(rf"^((?:[A-Za-z_]\w*\.)*{re.escape(type_name)})(?::|$)", re.MULTILINE)
    found = line.findall(traceback)
    return found[-1] if found else type_name
