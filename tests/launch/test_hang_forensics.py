"""Hang forensics end to end: 2 CPU ranks (gloo) under the real supervisor and torchrun.

A rank that skips a collective (VERI_FAULT=skip:1:3: it never enters step 3's first
all-reduce and waits in veri_tui/trainer/faults.py) must be named with the collective its peer waits
in and its own stack; a rank that never joins the process group (VERI_FAULT=no_join:1:0) must
fail the job in the load phase, naming the rendezvous. The SIGSTOPped rank is
tests/launch/test_hang.py's end-to-end case. Each prints how long the report took after the
fault (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from launch_helpers import cli, leftover_pids, wait_ended, wait_for

from veri_tui.jobfolder.supervise.progress import read_progress

SETS = ["--set", "max_steps=100000", "--set", "max_seq_length=64", "--set", "hang_timeout_s=10"]


def launch(home: Path, fault: str, *extra: str) -> tuple[str, Path]:
    out = cli("launch", "--gpu-count", "2", *SETS, *extra, env={**os.environ, "VERI_FAULT": fault})
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    return job_id, home / "jobs" / job_id


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_rank_that_skips_a_collective_is_named_with_the_collective_and_its_stack(
    home: Path,
) -> None:
    job_id, job_dir = launch(home, "skip:1:3")
    mark = wait_for(
        lambda: (m := read_progress(job_dir, 1)) and m.step == 3 and m.phase == "data" and m,
        180,
        "rank 1 at step 3",
    )
    fault = time.monotonic()  # the fault fires right after this mark
    rec = wait_ended(job_id, timeout=120)
    print(f"skip:1:3 reported {time.monotonic() - fault:.1f} s after the fault (hang_timeout_s=10)")
    err = rec["error"]
    assert (err["code"], err["attribution"], err["rank"]) == ("RANK_HUNG", "platform", 1), err
    head = "rank 1/2 (node 0, local_rank 1) failed: stopped making progress at step 3 (data) for "
    assert err["summary"].startswith(head), err["summary"]
    # The collective (kind, group, sequence number), who never entered it, and where it stood.
    tail = err["summary"].split(" s; ", 1)[1]
    seq = int(tail.split("all_reduce #")[1].split()[0])
    assert tail == (
        f"rank 1 never entered all_reduce #{seq} of the default group, which rank 0 waits in; "
        "rank 1 at veri_tui/trainer/faults.py:" + tail.rsplit("veri_tui/trainer/faults.py:", 1)[1]
    )
    assert tail.endswith(" in _stall")
    assert seq > 2 * 2  # steps 1 and 2 each ran their collectives before it
    log = (job_dir / "log.txt").read_text()
    assert f"waited in: all_reduce #{seq} of the default group, input sizes [[2]] Double" in log
    assert "rank 0: entered it" in log and "rank 1: never entered it" in log
    assert "veri_tui/trainer/loop.py" in log and "torch/distributed/distributed_c10d.py" in log
    # The answers stay in the job folder: rank 0's Flight Recorder holds the collective.
    dump = json.loads((job_dir / "forensics" / "rank-0.json").read_text())
    entries = dump["flight_recorder"]["entries"]
    assert entries[-1]["collective_seq_id"] == seq and not entries[-1]["retired"]
    assert mark.seq == read_progress(job_dir, 0).seq  # progress alone could not tell them apart
    wait_for(lambda: not leftover_pids(job_dir), 15, "no process of the job left")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_rendezvous_that_never_completes_is_reported_in_the_load_phase(home: Path) -> None:
    # The load timeout runs from the newest sign of life (a pid file, a mark); before the
    # first, 4 x that (120 s), room for a busy machine's interpreter start-up and imports.
    job_id, job_dir = launch(home, "no_join:1:0", "--set", "load_timeout_s=30")
    wait_for(lambda: read_progress(job_dir, 0), 180, "rank 0 in the rendezvous")
    joined = time.monotonic()
    rec = wait_ended(job_id, timeout=150)
    print(f"no_join:1:0 reported {time.monotonic() - joined:.1f} s after rank 0 began to wait")
    err = rec["error"]
    assert (err["code"], err["rank"]) == ("RANK_HUNG", 1), err
    assert err["summary"].startswith(
        "rank 1/2 (node 0, local_rank 1) failed: no rank advanced in the load phase for "
    ), err["summary"]
    assert (
        "(load_timeout_s 30 s); the rendezvous never completed: rank 1 never joined the "
        "process group, which rank 0 waits in; rank 1 at veri_tui/trainer/faults.py:"
        in err["summary"]
    )
    assert err["summary"].endswith(" in _stall")
    log = (job_dir / "log.txt").read_text()
    assert "rank 0: step 0 (rendezvous)" in log and "veri_tui/trainer/parallelize.py" in log
    assert not (job_dir / "metrics.jsonl").exists() or not (job_dir / "metrics.jsonl").read_text()
    wait_for(lambda: not leftover_pids(job_dir), 15, "no process of the job left")
