"""Which checkpoint a new attempt starts from: committed steps, newest first, verified.

A committed checkpoint is `checkpoints/step-<n>/` holding the `COMPLETE` marker and its
`manifest.json` (veri_tui/trainer/checkpoint.py writes both last, then renames `step-<n>.tmp` into
place). Verified means DCP's `.metadata` is there (a multi-node job's node part: each of the node's
ranks' `__<rank>.metadata`, the ranks its manifest names) and every file the manifest lists has its
size and sha256 (veri_tui/jobfolder/contract/manifest.py). The supervisor calls `choose` before each
attempt (a resume, or a retry after a platform failure) and passes the chosen folder to the trainer
as the spec's `resume_from`, so the trainer loads exactly that step; a corrupt newer step is skipped
and named. Partial writes (`step-<n>.tmp`, an artifact's `.<output>.tmp-<pid>`) are found by
`stale_writes` and removed before the next attempt.

Stdlib only: the supervisor imports it on GPU hosts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.layout import CHECKPOINTS

__all__ = [
    "CHECKPOINTS",
    "Choice",
    "choose",
    "committed",
    "pinned",
    "problems",
    "stale_writes",
]

COMPLETE = "COMPLETE"
_STEP = re.compile(r"^step-(\d+)$")


class Choice(NamedTuple):
    """Where the next attempt starts: ``step`` None means from scratch. ``skipped`` holds
    (step, reason) for every newer committed step that failed verification."""

    step: int | None
    path: Path | None
    skipped: list[tuple[int, str]]


def step_of(folder: Path | str) -> int | None:
    """N for a folder named `step-N`, else None."""
    found = _STEP.match(Path(folder).name)
    return int(found.group(1)) if found else None


def committed(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every committed checkpoint under ``root``, newest first."""
    out = []
    if Path(root).is_dir():
        for folder in Path(root).iterdir():
            step = step_of(folder)
            if step is None or not (folder / COMPLETE).is_file():
                continue
            if (folder / manifest.MANIFEST).is_file():
                out.append((step, folder))
    return sorted(out, reverse=True)


def metadata_files(folder: Path) -> list[str]:
    """DCP's metadata files the checkpoint needs: `.metadata`, or for a node's part of a
    multi-node checkpoint (its manifest lists the node's `ranks`) `__<rank>.metadata` each."""
    try:
        ranks = json.loads((Path(folder) / manifest.MANIFEST).read_text()).get("ranks")
    except (OSError, ValueError, AttributeError):
        ranks = None  # an unreadable manifest is reported by manifest.problems
    if isinstance(ranks, list) and ranks:
        return [f"__{int(r)}.metadata" for r in ranks]
    return [".metadata"]


def problems(folder: Path) -> list[str]:
    """What keeps ``folder`` from being a sound checkpoint, one line each; [] when sound."""
    out = [f"{folder}/{n}: missing" for n in metadata_files(folder) if not (folder / n).is_file()]
    return out + manifest.problems(folder)


def choose(root: Path) -> Choice:
    """The newest committed checkpoint under ``root`` whose files verify."""
    skipped: list[tuple[int, str]] = []
    for step, folder in committed(root):
        found = problems(folder)
        if not found:
            return Choice(step, folder, skipped)
        skipped.append((step, found[0] + (f" (and {len(found) - 1} more)" if found[1:] else "")))
    return Choice(None, None, skipped)


def pinned(root: Path, step: int | None) -> tuple[Choice, list[Path]]:
    """The step a launcher chose for a multi-node attempt (committed and verified on every
    node: this node cannot judge that alone), and this node's committed folders newer
    than it, which the new attempt saves again (never into an existing folder)."""
    newer = [folder for n, folder in committed(root) if step is None or n > step]
    return Choice(step, None if step is None else Path(root) / f"step-{step}", []), newer


def stale_writes(job_dir: Path, output_dir: Path | str | None = None) -> list[Path]:
    """Folders a killed checkpoint or artifact write left behind: `checkpoints/step-N.tmp`
    and the artifact's `.<output name>.tmp-<pid>` beside the output dir."""
    found = sorted((Path(job_dir) / CHECKPOINTS).glob("step-*.tmp"))
    if output_dir:
        out = Path(output_dir)
        found += sorted(out.parent.glob(f".{out.name}.tmp-*"))
    return [p for p in found if p.is_dir()]
