"""The forensic part of a hang report: which collective, who never entered it, where each stood.

The watchdog (veri_tui/jobfolder/supervise/watchdog.py) asks every rank for its dump
(veri_tui/jobfolder/failures/forensics.py) before it ends anything, and `explain` turns the answers
into one headline for the summary and the detail lines of the report (after the plan line in
log.txt, and job.json's ``error.traceback``):

    rank 1 never entered all_reduce #57 of the default group, which rank 0 waits in;
    rank 1 at veri_tui/trainer/faults.py:95 in _stall

In the load phase (before any rank's first step) no collective has run yet, and the stacks
tell a rendezvous that never completed: the ranks waiting in ``init_process_group`` against
the ones that never reached it (or never started). Stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veri_tui.jobfolder.failures.flightrec import (
    OURS,
    Finding,
    collectives,
    in_rendezvous,
    rank_list,
    short_path,
    stuck_collective,
    where,
)
from veri_tui.jobfolder.failures.forensics import Answers

STACK_LINES = 14  # innermost frames shown per rank


@dataclass
class Explanation:
    """What the answers tell: a headline ("" when nothing), the ranks to blame, the detail."""

    headline: str = ""
    blamed: list[int] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _stack_lines(stack: Sequence[Sequence[Any]]) -> list[str]:
    """The stack from the rank's entry (the interpreter's own start-up frames left out)."""
    frames = [(short_path(str(f[0])), f[1], f[2]) for f in stack if len(f) >= 3]
    first = next((i for i, f in enumerate(frames) if f[0].split("/")[0] in OURS), 0)
    return [f"      {path}:{line} in {name}" for path, line, name in frames[first:]][-STACK_LINES:]


def _placed(answers: Answers, rank: int) -> str:
    """``rank 1 at veri_tui/trainer/faults.py:95 in _stall``, or why its stack is not available."""
    if rank in answers.dumps:
        spot = where(answers.dumps[rank].get("stack") or [])
        return f"rank {rank} at {spot}" if spot else f"rank {rank}: its stack was not recorded"
    why = answers.silent.get(rank, "no answer")
    if spot := where(answers.stacks.get(rank) or []):
        return f"rank {rank} at {spot} ({why}: its stack read from the process)"
    return f"rank {rank}: its stack is not available ({why})"


def _verb(ranks: Sequence[int], one: str, many: str) -> str:
    return one if len(ranks) == 1 else many


def _collective_headline(f: Finding) -> str:
    c = f.collective
    assert c is not None
    inside = rank_list(f.entered) if f.entered else "no rank"
    if f.never_entered:
        return (
            f"{rank_list(f.never_entered)} never entered {c.title()}, which {inside} "
            f"{_verb(f.entered, 'waits', 'wait')} in"
        )
    if f.silent:
        return (
            f"{rank_list(f.silent)} {_verb(f.silent, 'is', 'are')} missing from {c.title()}, "
            f"which {inside} entered"
        )
    if f.remote:
        return (
            f"{rank_list(f.remote)} (on another node: see its report) "
            f"{_verb(f.remote, 'is', 'are')} missing from {c.title()}, which {inside} entered"
        )
    return f"every rank entered {c.title()} and none completed it (a stuck device or network)"


def _rank_line(answers: Answers, rank: int, f: Finding | None) -> str:
    if rank not in answers.dumps:
        return f"  rank {rank}: no answer: {answers.silent.get(rank, 'no answer')}"
    if f is None or f.collective is None:
        return f"  rank {rank}: at {where(answers.dumps[rank].get('stack') or [])}"
    c = f.collective
    mine = [x for x in collectives(answers.dumps[rank].get("flight_recorder")) if x.key == c.key]
    last = "none"
    if mine:
        last = f"{mine[-1].kind} #{mine[-1].seq}, {'completed' if mine[-1].done else 'in flight'}"
    state = "entered it" if rank in f.entered else "never entered it"
    return f"  rank {rank}: {state} (newest in the group: {last})"


def explain(
    answers: Answers, ranks: list[int], loading: bool = False, world: int = 0
) -> Explanation:
    """The headline, blame and detail lines for a hang, from the ranks' answers; ``world``:
    the job's rank count, when ``ranks`` (those watched here) are only one node's."""
    frs = {r: d["flight_recorder"] for r, d in answers.dumps.items() if d.get("flight_recorder")}
    found = stuck_collective(frs, list(answers.silent), ranks)
    out = Explanation()
    out.lines.append(
        "forensics (each rank's Flight Recorder and Python stack, read before the end):"
    )
    if found is not None and found.collective is not None:
        out.headline, out.blamed = _collective_headline(found), found.blamed
        out.lines.append(f"  waited in: {found.collective.title()}, {found.collective.shape()}")
    elif loading:
        out.headline, out.blamed = _rendezvous_headline(answers, ranks, world)
    for rank in ranks:
        out.lines.append(_rank_line(answers, rank, found))
        if rank in answers.dumps:
            out.lines.extend(_stack_lines(answers.dumps[rank].get("stack") or []))
        elif rank in answers.stacks:
            out.lines.append("    its stack, read from the stopped process:")
            out.lines.extend(_stack_lines(answers.stacks[rank]))
    if out.blamed:
        out.headline += "; " + "; ".join(_placed(answers, r) for r in out.blamed)
    return out


def _rendezvous_headline(answers: Answers, ranks: list[int], world: int) -> tuple[str, list[int]]:
    """Before the first collective: the ranks that never joined the process group."""
    waiting = [r for r in ranks if in_rendezvous((answers.dumps.get(r) or {}).get("stack") or [])]
    absent = [r for r in ranks if r not in waiting]
    if waiting and not absent:  # nothing here to blame: the ranks they wait for are elsewhere
        if world > len(ranks):
            return (
                "the rendezvous never completed: every rank of this node waits in it, for "
                "the ranks of the other nodes",
                [],
            )
        return (
            "the rendezvous never completed: every rank waits in it (the store at "
            "MASTER_ADDR:MASTER_PORT never gathered them)",
            [],
        )
    if not waiting:
        return "", []  # none waits in it: the stacks alone say where they are
    return (
        f"the rendezvous never completed: {rank_list(absent)} never joined the process group, "
        f"which {rank_list(waiting)} {_verb(waiting, 'waits', 'wait')} in"
    ), absent
