"""Read the ranks' Flight Recorder dumps and stacks into what a hang report says.

Each answer (veri_tui/jobfolder/failures/forensics.py) holds a rank's Flight Recorder dump: one
entry per collective the process entered, with its process group (``process_group``: name and
description, ``default_pg`` for the default group), its sequence number in that group
(``collective_seq_id``), its kind (``profiling_name``, e.g. ``gloo:all_reduce``), input sizes and
dtypes, and whether it completed (``retired``, or NCCL's ``state`` ``completed``). A rank answers
with NCCL's and gloo's recorders merged (a cpu_offload job's group runs both:
``cuda:nccl,cpu:gloo``); each backend numbers its own collectives, so a group's sequence is followed
per backend (the prefix of ``profiling_name``). The collective a hung job waits in is the oldest one
still in flight on some rank; its members that never entered it (their newest sequence number in
that group and backend is lower) are the ranks that held everyone up:

    rank 1 never entered all_reduce #57 of the default group, which rank 0 waits in;
    rank 1 at veri_tui/trainer/data.py:88 in rank_slice

A rank that could not answer (stopped, exited) is "missing" from it (it may have stopped
inside it), with the reason its stack is not available. Stdlib only.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

OURS = ("trainer", "jobfolder", "veri_tui")  # a stack is placed at its innermost frame of these
RENDEZVOUS = ("init_process_group", "_store_based_barrier", "rendezvous", "init_device_mesh")


def short_path(filename: str) -> str:
    """`veri_tui/trainer/loop.py` for this project's files, `torch/...` for installed ones."""
    parts = filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return "/".join(parts[i + 1 :])
    for i, part in enumerate(parts[:-1]):
        if part in OURS:
            return "/".join(parts[i:])
    return filename


def backend_of(entry: Mapping[str, Any]) -> str:
    """``nccl`` or ``gloo``: the backend a Flight Recorder entry was recorded by (the prefix
    of its ``profiling_name``); "" when it names none."""
    name = str(entry.get("profiling_name") or "")
    return name.split(":", 1)[0] if ":" in name else ""


def where(stack: Sequence[Sequence[Any]]) -> str:
    """``veri_tui/trainer/faults.py:95 in _stall``: the innermost frame of this project's code (the
    call that is waiting), else the innermost frame; "" for no stack."""
    frames = [(short_path(str(f[0])), f[1], f[2]) for f in stack if len(f) >= 3]
    ours = [f for f in frames if f[0].split("/")[0] in OURS]
    if not frames:
        return ""
    path, line, name = (ours or frames)[-1]
    return f"{path}:{line} in {name}"


def in_rendezvous(stack: Sequence[Sequence[Any]]) -> bool:
    """True when the stack waits in the process group's rendezvous (joining the group)."""
    return any(len(f) >= 3 and f[2] in RENDEZVOUS for f in stack)


@dataclass(frozen=True)
class Collective:
    """One collective as a rank's Flight Recorder saw it."""

    group: str  # the process group's name in the dump
    desc: str
    seq: int
    kind: str
    sizes: list[Any]
    dtypes: list[Any]
    done: bool
    created_ns: int
    frames: list[dict[str, Any]] = field(default_factory=list, compare=False)
    backend: str = ""  # nccl, gloo: each numbers its own collectives (`seq`)
    named: bool = False  # say the backend: the group ran collectives on both

    @property
    def key(self) -> tuple[str, str]:
        """What a sequence number counts within: the group and the backend."""
        return (self.group, self.backend)

    def group_name(self) -> str:
        if self.desc == "default_pg" or (not self.desc and self.group in ("0", "")):
            return "the default group"
        return f"process group {self.group}" + (f" ({self.desc})" if self.desc else "")

    def title(self) -> str:
        over = f" ({self.backend})" if self.named and self.backend else ""
        return f"{self.kind}{over} #{self.seq} of {self.group_name()}"

    def shape(self) -> str:
        return f"input sizes {self.sizes} {','.join(map(str, self.dtypes))}".rstrip()


def collectives(fr: Mapping[str, Any] | None) -> list[Collective]:
    """The non-p2p collectives of one rank's dump, in the order entered."""
    out = []
    for e in (fr or {}).get("entries") or []:
        if e.get("is_p2p"):
            continue
        group = e.get("process_group") or ["", ""]
        name = str(e.get("profiling_name") or "collective")
        out.append(
            Collective(
                group=str(group[0]),
                desc=str(group[1]) if len(group) > 1 else "",
                seq=int(e.get("collective_seq_id") or 0),
                kind=name.split(":", 1)[-1],
                sizes=list(e.get("input_sizes") or []),
                dtypes=list(e.get("input_dtypes") or []),
                done=bool(e.get("retired")) or e.get("state") == "completed",
                created_ns=int(e.get("time_created_ns") or 0),
                frames=list(e.get("frames") or []),
                backend=backend_of(e),
            )
        )
    return out


def _members(
    fr_by_rank: Mapping[int, Mapping[str, Any]], group: str, ranks: list[int]
) -> list[int]:
    """The group's global ranks from a dump's ``pg_config``; else every rank watched."""
    for fr in fr_by_rank.values():
        for key, cfg in ((fr or {}).get("pg_config") or {}).items():
            if group and group in (key, str(cfg.get("name"))):
                try:
                    return sorted(int(r) for r in ast.literal_eval(str(cfg.get("ranks"))))
                except (ValueError, SyntaxError, TypeError):
                    break
    return list(ranks)


@dataclass
class Finding:
    """What the dumps say: the collective waited in and who is missing from it."""

    collective: Collective | None
    entered: list[int]
    never_entered: list[int]  # answered, and their newest seq in the group is lower
    silent: list[int]  # members that could not answer (reason in the answers)
    remote: list[int]  # members watched by another node's supervisor

    @property
    def blamed(self) -> list[int]:
        return self.never_entered or self.silent


def stuck_collective(
    fr_by_rank: Mapping[int, Mapping[str, Any]], silent: Sequence[int], ranks: list[int]
) -> Finding | None:
    """The oldest collective still in flight on some rank, and its members' part in it;
    None when no dump shows one in flight (a hang outside collectives, or no recorder)."""
    per_rank = {r: collectives(fr) for r, fr in fr_by_rank.items()}
    flight = [c for cs in per_rank.values() for c in cs if not c.done]
    if not flight:
        return None
    oldest = min(flight, key=lambda c: (c.created_ns, c.seq))
    seq = min(c.seq for c in flight if c.key == oldest.key)
    coll = next(c for c in flight if c.key == oldest.key and c.seq == seq)
    both = {c.backend for cs in per_rank.values() for c in cs if c.group == coll.group}
    if len(both) > 1:  # a group with two backends: say which one's #seq
        coll = replace(coll, named=True)
    members = _members(fr_by_rank, coll.group, ranks)
    newest = {
        r: max((c.seq for c in cs if c.key == coll.key), default=0) for r, cs in per_rank.items()
    }
    return Finding(
        collective=coll,
        entered=[r for r in members if r in newest and newest[r] >= seq],
        never_entered=[r for r in members if r in newest and newest[r] < seq],
        silent=[r for r in members if r in silent],
        remote=[r for r in members if r not in newest and r not in silent and r not in ranks],
    )


def rank_list(ranks: Sequence[int]) -> str:
    words = [str(r) for r in ranks]
    if len(words) == 1:
        return f"rank {words[0]}"
    return "ranks " + ", ".join(words[:-1]) + " and " + words[-1]
