"""A rank's SIGKILL near full memory is reported as a likely out-of-memory kill.

The decision is checked on a real torchrun SIGKILL (tests/fixtures/failures/kill) with memory
readings from a meminfo file, and end to end with the kernel's own OOM killer: a real job in a
small memory cgroup, one rank filling it (VERI_FAULT host_oom), which needs root and a
writable memory cgroup (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from veri_tui.jobfolder.failures import failures, hostmem

KILL = Path(__file__).resolve().parents[1] / "fixtures" / "failures" / "kill"
HINT = "likely the host's out-of-memory killer (see docs/jobs.md)"


def meminfo(tmp_path: Path, total_kb: int, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(
        f"MemTotal:       {total_kb} kB\nMemFree:        {available_kb // 2} kB\n"
        f"MemAvailable:   {available_kb} kB\nBuffers:          1024 kB\n"
    )
    return path


def died_at() -> float:
    """When torchrun saw the captured rank 1 die, read as failures.analyze reads it."""
    (lost,) = [c for c in failures.summary_records(KILL / "torchrun.log", 2) if c.signum == 9]
    return lost.time_ns / 1e9


def test_node_used_reads_meminfo(tmp_path: Path) -> None:
    assert hostmem.node_used(meminfo(tmp_path, 1000, 30)) == pytest.approx(0.97)
    assert hostmem.node_used(tmp_path / "missing") is None
    assert 0.0 < hostmem.node_used() < 1.0  # this machine's own /proc/meminfo


def test_sigkill_with_the_node_near_full_says_so(tmp_path: Path) -> None:
    watch = hostmem.MemoryWatch(meminfo=meminfo(tmp_path, 64_000_000, 1_900_000))
    watch.sample(at=died_at() - 1.5)
    err = failures.analyze(KILL, world_size=2, nproc_per_node=2, exit_code=1, memory=watch)
    assert (err["rank"], err["code"], err["attribution"]) == (1, "RANK_LOST", "platform")
    assert err["message"].endswith(
        "killed by signal 9 (SIGKILL), pid 15096; the node was at 97% of its memory: " + HINT
    )
    assert err["summary"].endswith(HINT)


@pytest.mark.parametrize(
    ("available_kb", "offset_s"),
    [(32_000_000, -1.5), (1_900_000, -60.0)],  # half full; near full but long before
)
def test_no_hint_without_pressure_around_the_death(
    tmp_path: Path, available_kb: int, offset_s: float
) -> None:
    watch = hostmem.MemoryWatch(meminfo=meminfo(tmp_path, 64_000_000, available_kb))
    watch.sample(at=died_at() + offset_s)
    err = failures.analyze(KILL, world_size=2, nproc_per_node=2, exit_code=1, memory=watch)
    assert err["message"] == "killed by signal 9 (SIGKILL), pid 15096"


def test_an_exception_is_not_an_oom_kill_however_full_the_node(tmp_path: Path) -> None:
    watch = hostmem.MemoryWatch(meminfo=meminfo(tmp_path, 64_000_000, 100_000))
    watch.sample()
    raised = KILL.parent / "raise"
    err = failures.analyze(raised, world_size=2, nproc_per_node=2, exit_code=1, memory=watch)
    assert HINT not in err["message"] and err["code"] == "UNKNOWN"


def test_cgroup_v2_files_are_found_and_read(tmp_path: Path) -> None:
    """The layout of a cgroup v2 host (this machine has v1), as the kernel writes it."""
    folder = tmp_path / "cg" / "system.slice" / "job"
    folder.mkdir(parents=True)
    (folder / "memory.max").write_text("1000000\n")
    (folder / "memory.current").write_text("985000\n")
    (folder / "memory.stat").write_text("anon 900000\nfile 85000\ninactive_file 15000\n")
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/system.slice/job\n")
    (proc / "mountinfo").write_text(
        f"25 30 0:22 / /proc rw,nosuid - proc proc rw\n"
        f"35 25 0:30 / {tmp_path / 'cg'} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    group = hostmem.find_cgroup(proc)
    assert group is not None and (group.folder, group.v2) == (folder, True)
    assert (group.limit(), group.oom_kills()) == (1_000_000, 2)
    assert group.used() == pytest.approx(0.97)  # inactive page cache is not counted
    watch = hostmem.MemoryWatch(meminfo=meminfo(tmp_path, 1000, 900), cgroup=group)
    watch.sample(at=100.0)
    assert watch.kill_note(101) == "the job's memory cgroup was at 97% of its limit"
    (folder / "memory.events").write_text("oom 3\noom_kill 3\n")
    assert watch.kill_note(101) == "the kernel counted 1 out-of-memory kill in the job's cgroup"


def _child_cgroup(limit: int) -> Path:
    group = hostmem.find_cgroup()
    if os.geteuid() != 0 or group is None:
        pytest.skip("needs root and a memory cgroup")
    folder = group.folder / f"veri-test-{os.getpid()}"
    try:
        folder.mkdir()
        (folder / ("memory.max" if group.v2 else "memory.limit_in_bytes")).write_text(str(limit))
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")
    return folder


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_rank_killed_by_the_kernels_oom_killer_is_reported_so(home: Path) -> None:
    folder = _child_cgroup(2_500 << 20)  # the job needs about 1.3 GB; rank 1 fills the rest

    def join() -> None:  # runs in the child before exec: the job inherits the cgroup
        (folder / "cgroup.procs").write_text(str(os.getpid()))

    env = {**os.environ, "VERI_FAULT": "host_oom:1:2"}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "veri_tui", "launch", "--gpu-count", "2"]
            + ["--set", "max_steps=4", "--wait"],
            capture_output=True,
            text=True,
            timeout=170,
            env=env,
            preexec_fn=join,
            check=False,
        )
    finally:
        kills = hostmem.Cgroup(folder, (folder / "memory.events").exists()).oom_kills()
        try:
            folder.rmdir()
        except OSError:
            pass  # a process is still in it; the home fixture ends the job's processes
    assert out.returncode == 1, out.stderr
    assert kills and kills >= 1  # the kernel's OOM killer did act
    job_id = out.stdout.splitlines()[0]
    err = json.loads((home / "jobs" / job_id / "job.json").read_text())["error"]
    assert (err["rank"], err["code"], err["attribution"]) == (1, "RANK_LOST", "platform")
    assert err["message"].startswith("killed by signal 9 (SIGKILL), pid ")
    assert "out-of-memory kill" in err["message"], err["message"]
    assert "in the job's cgroup" in err["message"]
    assert err["message"].endswith(HINT)
