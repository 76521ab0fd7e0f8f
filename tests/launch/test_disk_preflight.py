"""The disk preflight (veri_tui/launch/diskcheck.py) on real small filesystems: a job whose
checkpoints cannot fit is refused before anything starts, with the numbers; one that fits runs
and writes about what the plan said (the estimate against real checkpoints and artifact).

The small filesystems are tmpfs mounts made by the test: root only (CI runs as root).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from veri_tui.launch import jobs
from veri_tui.launch.diskcheck import Place, local_place, refusals
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.disk import size

pytestmark = pytest.mark.timeout(180)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`veri-tui ARGS` in a fresh process (the environment carries VERI_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "veri_tui", *args],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )


def nothing_but_the_planners_cache(fs: Path, home: Path) -> bool:
    """No job folder and no file on ``fs`` except what planning caches ($VERI_HOME/cache)."""
    files = [p for p in fs.rglob("*") if p.is_file()]
    return not (home / "jobs").exists() and all(home / "cache" in p.parents for p in files)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """Mount tmpfs filesystems of a given size (removed afterwards)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mounted: list[Path] = []

    def mount(name: str, size_opt: str) -> Path:
        where = tmp_path / name
        where.mkdir()
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_opt}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_checkpoints_that_cannot_fit_are_refused_before_anything_starts(
    small_fs, monkeypatch
) -> None:
    fs = small_fs("small", "8M")
    home = fs / "veri-home"
    monkeypatch.setenv("VERI_HOME", str(home))
    sets = ["max_steps=40", "checkpoint_steps=1", "keep_checkpoints=8"]
    args = [a for s in sets for a in ("--set", s)]
    out = cli("launch", "--gpu-count", "2", *args)
    assert out.returncode == 2
    disk = plan_job(load_job_config(None, gpu_count=2, sets=sets)).disk
    assert disk.checkpoints == 9  # 8 kept + the one being written
    free = local_place(home / "jobs").free
    assert out.stderr == (
        f"error: disk: {size(disk.total_bytes)} needed on {home / 'jobs'} (9 checkpoints x "
        f"{size(disk.checkpoint_bytes)} + artifact {size(disk.artifact_bytes)}), {size(free)} "
        "free; lower keep_checkpoints, checkpoint less often, or free space\n"
    )
    assert out.stdout == "" and nothing_but_the_planners_cache(fs, home)  # no job folder
    # The launch screen's preflight says the same, as a failed row, and writes nothing.
    job = load_job_config(None, gpu_count=2, sets=sets)
    rows = jobs.preflight(job)
    assert ("disk", False, out.stderr.removeprefix("error: disk: ").strip()) in rows
    assert nothing_but_the_planners_cache(fs, home)


def test_an_artifact_that_cannot_fit_the_output_disk_is_refused(
    small_fs, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path / "veri-home"))
    out_fs = small_fs("out", "256K")
    output = out_fs / "model"
    res = cli("launch", "--gpu-count", "2", "--set", "precision=fp32", "--output", str(output))
    assert res.returncode == 2
    art = plan_job(load_job_config(None, gpu_count=2, sets=["precision=fp32"])).disk
    assert res.stderr.startswith(
        f"error: disk: {size(art.artifact_bytes)} needed on {output} (artifact "
        f"{size(art.artifact_bytes)}), "
    )
    assert res.stderr.endswith("free; choose another --output, or free space\n")
    assert not (tmp_path / "veri-home" / "jobs").exists() and list(out_fs.iterdir()) == []


def test_each_filesystem_holds_its_own_share() -> None:
    disk = plan_job(load_job_config(None, sets=["checkpoint_steps=1"])).disk
    need = disk.total_bytes
    one = Place("/a", need, 1)
    assert refusals(disk, one, one) == []
    assert [r.key for r in refusals(disk, one._replace(free=need - 1), one)] == ["disk"]
    # Apart: the job disk holds the checkpoints only, the output disk the artifact only.
    job, out = Place("/a", disk.checkpoints_bytes, 1), Place("/b", disk.artifact_bytes, 2)
    assert refusals(disk, job, out) == []
    both = refusals(disk, job._replace(free=0), out._replace(free=0))
    assert [r.message.split(" (")[0].split(" on ")[1] for r in both] == ["/a", "/b"]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_a_job_that_fits_runs_and_writes_what_the_plan_said(
    small_fs, monkeypatch, precision: str
) -> None:
    fs = small_fs("small", "8M")
    home = fs / "veri-home"
    monkeypatch.setenv("VERI_HOME", str(home))
    sets = ["max_steps=2", "checkpoint_steps=1", f"precision={precision}"]
    out = cli("launch", "--gpu-count", "2", *[a for s in sets for a in ("--set", s)], "--wait")
    assert out.returncode == 0, out.stderr
    job_dir = home / "jobs" / out.stdout.splitlines()[0]
    disk = plan_job(load_job_config(None, gpu_count=2, sets=sets)).disk

    def du(folder: Path) -> int:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())

    written = [du(job_dir / "checkpoints" / f"step-{n}") for n in (1, 2)]
    artifact = du(job_dir / "output")
    print(f"{precision}: checkpoints {written} bytes written, {disk.checkpoint_bytes} planned")
    print(f"{precision}: artifact {artifact} bytes written, {disk.artifact_bytes} planned")
    # The estimate may round up (framing is approximated) but never under what was written.
    assert all(1.0 <= disk.checkpoint_bytes / w <= 1.1 for w in written)
    assert 0.97 <= disk.artifact_bytes / artifact <= 1.03
