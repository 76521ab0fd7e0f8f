"""The Slurm batch job's probe of its allocation before training
(veri_tui/jobfolder/probe/slurmprobe.py), on the test cluster: `--dry-run` shows the step and
`--exclude`; a node made slow on purpose (VERI_PROBE_DELAY, passed on by sbatch and srun) is named
and the job stops before training with nothing left running; the step itself inside `salloc -N 2`
with a fake nvidia-ml-py whose GPU on node 1 has a row remapping pending: the sick node stops a job,
or is recorded and passed with --allow-slow-nodes' mode. The healthy 2-node job that probes and then
trains is test_slurm_launch.py's `test_two_nodes_one_rank_each_match_a_local_run`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launch.launch_helpers import wait_ended, wait_for
from slurm_helpers import cli, home, processes_of, slurm_job_dir
from support.fakenvml import write_fake_pynvml
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
    assert re.fullmatch(r"env PYTHONPATH=\S+ \S+ -m veri_tui\.jobfolder\.slurmprobe "
                        r"--job \S+/job\.json \|\| exit \$\?", probe), probe  # fmt: skip
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
    shown = slurm.run("scontrol", "show", "job", "-o", record["scheduler"]["id"])
    assert re.search(r"JobState=FAILED .*ExitCode=3:0", shown), shown  # Slurm's own record
    code, shown, _ = cli(capsys, "jobs", job_id)
    with capsys.disabled():
        print(shown)
    assert "error: HARDWARE_ERROR (platform): job failed: the fleet probe stopped the job" in (
        shown) and f"  refused: {refused[0]}" in shown, shown  # fmt: skip
    assert "probe: refused: node 1 (127.0.0.2) is slow" in (job_dir / "log.txt").read_text()
    assert jobs.get_job(job_id)["status"] == "failed"  # the controller's end did not undo it


# Node 1's GPU (the srun task's $SLURM_NODEID) has a row remapping pending; node 0's is well.
SICK_ON_NODE_1 = """
import os as _os
def nvmlDeviceGetRemappedRows(h):
    return (0, 1, 1, 0) if _os.environ.get("SLURM_NODEID") == "1" else (0, 0, 0, 0)
"""


def _job(folder: Path, mode: str) -> Path:
    folder.mkdir(parents=True)
    spec = {"nnodes": 2, "nproc_per_node": 1, "gpu_count": 2,
            "slurm": {"partition": "debug", "nodes": 2, "probe": mode}}  # fmt: skip
    path = folder / "job.json"
    path.write_text(json.dumps({"job_id": folder.name, "status": "pending", "spec": spec}))
    return path


def test_a_sick_node_stops_the_step_or_is_recorded_with_allow(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    fake = write_fake_pynvml(tmp_path / "fake", count=1, pending=-1)
    fake.write_text(fake.read_text() + SICK_ON_NODE_1)
    stop, allow = _job(tmp_path / "stop", "stop"), _job(tmp_path / "allow", "allow")
    step = f"{sys.executable} -m veri_tui.jobfolder.probe.slurmprobe --job"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, **slurm.env, "VERI_HOME": str(tmp_path / "veri"),
           "PYTHONPATH": f"{fake.parent}:{root}"}  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(
        ["salloc", "--nodes=2", "--partition=debug", "bash", "-c",
         f"{step} {stop}; echo rc=$?; {step} {allow}; echo rc=$?"],
        capture_output=True, text=True, env=env, timeout=500, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    print(out.stdout, out.stderr, f"salloc + 2 probes: {time.monotonic() - started:.1f} s")
    assert re.findall(r"^rc=(\d+)$", out.stdout, re.M) == ["3", "0"], out.stdout + out.stderr
    sick = ("node 1 (127.0.0.2) is sick: GPU 0: a row remapping is pending (reset the GPU to "
            "apply it); leave it out (launch it again with --exclude 127.0.0.2")  # fmt: skip
    stopped = json.loads(stop.read_text())
    assert (stopped["status"], stopped["error"]["code"]) == ("failed", "HARDWARE_ERROR")
    assert sick in stopped["error"]["message"]
    assert [r[: len(sick)] for r in stopped["probe"]["refused"]] == [sick]
    assert any(ln.startswith("gpu health: 127.0.0.2: SICK: 1 GPU, driver 550.54.15")
               for ln in stopped["probe"]["lines"])  # fmt: skip
    went_on = json.loads(allow.read_text())
    assert went_on["status"] == "pending" and went_on.get("error") is None
    assert [r[: len(sick)] for r in went_on["probe"]["refused"]] == [sick]
    log = (allow.parent / "log.txt").read_text()
    assert "probe: going on at your own risk (--allow-slow-nodes)" in log
    assert json.loads((allow.parent / "probe.json").read_text())["sick"]
