"""The disk preflight: free space against what the job will write, before anything starts.

What the job writes comes from the plan (`PlanRecord.disk`, veri_tui/plan/disk.py): its
checkpoints at their most, in the job folder, and the final artifact, in the output dir. Each
filesystem must hold its share; the job folder and the output dir on one filesystem need the
sum. Free space is what an unprivileged writer may use (statvfs `f_bavail x f_frsize`), at the
nearest folder that exists (the job folder and the output dir are made later). A job that does
not fit is refused with the numbers and the ways out:

    error: disk: 9.8 MB needed on /mnt/x (9 checkpoints x 1.1 MB + artifact 0.3 MB),
    7.9 MB free; lower keep_checkpoints, checkpoint less often, or free space    (one line)

Locally here (`check_local`, called by veri_tui.launch.jobs); on an SSH host the same
`refusals` run on free space measured there (veri_tui.launch.ssh.preflight.remote_places).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from veri_tui.errors import Refusal, VeriError
from veri_tui.plan.disk import DiskEstimate, size


class Place(NamedTuple):
    """A folder the job writes to, and the filesystem it will land on."""

    path: str  # the folder as the user knows it
    free: int  # bytes an unprivileged writer may still use there
    device: int  # st_dev of the nearest existing folder: equal means one filesystem


def local_place(path: Path | str) -> Place:
    """Free space and filesystem for ``path``, measured at its nearest existing folder."""
    probe = Path(path)
    while not probe.is_dir() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return Place(str(path), st.f_bavail * st.f_frsize, os.stat(probe).st_dev)


def refusals(
    disk: DiskEstimate, job: Place, output: Place, extra: tuple[str, int] | None = None
) -> list[Refusal]:
    """A `disk` refusal for each filesystem that cannot hold its share. ``extra``: (what,
    bytes) the job folder also needs (an SSH job's uploads)."""
    same = job.device == output.device
    parts = disk.parts(with_checkpoints=True, with_artifact=same)
    need = disk.checkpoints_bytes + (disk.artifact_bytes if same else 0)
    if extra and extra[1]:
        parts = " + ".join(p for p in (parts, f"{extra[0]} {size(extra[1])}") if p)
        need += extra[1]
    out = []
    if need > job.free:
        ways = "lower keep_checkpoints, checkpoint less often"
        if not disk.checkpoints:
            ways = "choose another --output"
        out.append(_refusal(need, job, parts, ways))
    if not same and disk.artifact_bytes > output.free:
        parts = disk.parts(with_checkpoints=False)
        out.append(_refusal(disk.artifact_bytes, output, parts, "choose another --output"))
    return out


def _refusal(need: int, place: Place, parts: str, ways: str) -> Refusal:
    return Refusal(
        "disk",
        f"{size(need)} needed on {place.path} ({parts}), {size(place.free)} free; "
        f"{ways}, or free space",
    )


def row(disk: DiskEstimate, job: Place, output: Place) -> tuple[str, bool, str]:
    """The preflight row of a job that fits: what it needs and what is free where."""
    if job.device == output.device:
        where = f"{size(disk.total_bytes)} of {size(job.free)} free on {job.path}"
    else:
        where = (
            f"{size(disk.checkpoints_bytes)} of {size(job.free)} free on {job.path}, "
            f"{size(disk.artifact_bytes)} of {size(output.free)} free on {output.path}"
        )
    return ("disk", True, f"{where} ({disk.parts()})")


def check_local(disk: DiskEstimate, job_dir: Path, output_dir: Path) -> tuple[str, bool, str]:
    """Refuse (VeriError) a job whose folders on this machine cannot hold what it writes;
    else its preflight row."""
    job, output = local_place(job_dir), local_place(output_dir)
    problems = refusals(disk, job, output)
    if problems:
        raise VeriError(problems)
    return row(disk, job, output)
