"""The Slurm batch job's probe of its allocation before training (jobfolder/slurmprobe.py), on
the test cluster: `--dry-run` shows the step and `--exclude`; a node made slow on purpose
(VERI_PROBE_DELAY, passed on by sbatch and srun) is named and the job stops before training
with nothing left running. The healthy 2-node job that probes and then trains is
test_slurm_launch.py's `test_two_nodes_one_rank_each_match_a_local_run`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from launch.launch_helpers import wait_ended, wait_for
from slurm_helpers import cli, home, processes_of, slurm_job_dir
from support.slurm_cluster import SlurmCluster

from veri_tui.launch import jobs

__all__ = ["home"]  # the fixture, imported for the tests below

SLURM = ("--slurm", "local", "--partition", "debug")
TWO = ("--nodes", "2", "--gpus-per-node", "1")
pytestmark = pytest.mark.slow


def test_dry_run_shows_the_probe_step_and_the_exclusion(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    code, out, err = cli(capsys, "launch", *SLURM, *TWO, "--exclude", "n[3-4],n9", "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert "#SBATCH --exclude=n[3-4],n9" in lines
    step = lines.index("trap 'veri_usr1=1' USR1")
    probe, untrap, supervise = lines[step + 1 : step + 4]
    assert re.fullmatch(r"env PYTHONPATH=\S+ \S+ -m jobfolder\.slurmprobe --job \S+/job\.json "
                        r"\|\| exit \$\?", probe), probe  # fmt: skip
    assert untrap == "trap - USR1" and supervise.startswith("exec env PYTHONPATH=")
    assert supervise.split("--job")[1] == probe.split("--job")[1].removesuffix(" || exit $?")
    # --no-probe: no step; one node of CPU ranks: none either (nothing to judge).
    code, out, err = cli(capsys, "launch", *SLURM, *TWO, "--no-probe", "--dry-run")
    assert code == 0 and "slurmprobe" not in out, err
    code, out, err = cli(capsys, "launch", *SLURM, "--gpus-per-node", "2", "--dry-run")
    assert code == 0 and "slurmprobe" not in out, err
    code, _, err = cli(capsys, "launch", *SLURM, "--exclude", "a b", "--dry-run")
    assert code == 2 and err.startswith("error: slurm.exclude: 'a b': give a name"), err


def test_a_slow_node_stops_the_job_before_training(
    slurm: SlurmCluster, home: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_PROBE_DELAY", "1:0.1")  # node 1's ranks lag every collective
    started = time.monotonic()
    code, out, err = cli(capsys, "launch", *SLURM, *TWO, "--set", "max_steps=4")
    assert code == 0, err
    job_id = out.strip()
    record = wait_ended(job_id, 300)
    with capsys.disabled():
        print(f"\nslow node: job ended {time.monotonic() - started:.1f} s after the launch")
    job_dir = slurm_job_dir(home, job_id)
    error = record["error"]
    assert (record["status"], error["code"], error["attribution"]) == (
        "failed", "HARDWARE_ERROR", "platform")  # fmt: skip
    refused = record["probe"]["refused"]
    assert len(refused) == 1 and refused[0].startswith(
        "node 1 (127.0.0.2) is slow: the others waited "), refused  # fmt: skip
    assert refused[0].endswith("; leave it out (launch it again with --exclude 127.0.0.2, or "
                               'exclude = "127.0.0.2" in [slurm]) or pass --allow-slow-nodes '
                               "to go on at your own risk")  # fmt: skip
    assert refused[0] in error["message"]
    # Stopped before training: no rank started, no step, nothing left running.
    assert not (job_dir / "metrics.jsonl").exists() and not list(job_dir.glob("pids/rank-*"))
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to end")
    assert processes_of(job_dir) == []
    shown = slurm.run("scontrol", "show", "job", "-o", str(record["slurm_job_id"]))
    assert re.search(r"JobState=FAILED .*ExitCode=3:0", shown), shown  # Slurm's own record
    code, shown, _ = cli(capsys, "jobs", job_id)
    with capsys.disabled():
        print(shown)
    assert "error: HARDWARE_ERROR (platform): job failed: the fleet probe stopped the job" in (
        shown) and f"  refused: {refused[0]}" in shown, shown  # fmt: skip
    assert "probe: refused: node 1 (127.0.0.2) is slow" in (job_dir / "log.txt").read_text()
    assert jobs.get_job(job_id)["status"] == "failed"  # the controller's end did not undo it
