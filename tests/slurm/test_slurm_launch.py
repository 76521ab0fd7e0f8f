"""`veri-tui launch/plan --slurm local` against the real test cluster: the plan of a partition,
refusals before anything is submitted, the batch script, a 2-rank job through sbatch and
torchrun with the losses of a local run, and cancel (support/slurm_cluster.py). A SIGKILLed
rank (failed, RANK_LOST, naming rank 1) is the backend conformance suite's (tests/backends,
the slurm backend)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from launch.launch_helpers import wait_ended, wait_for
from slurm_helpers import (
    LONG,
    cli,
    home,
    losses,
    processes_of,
    slurm_job_dir,
)
from support.slurm_cluster import SlurmCluster

from veri_tui.launch import jobs
from veri_tui.launch.probe.report import cached
from veri_tui.plan import load_job_config

__all__ = ["home"]  # the fixture, imported for the tests below

SLURM = ("--slurm", "local")
# Every test here runs Slurm jobs (seconds each): left out of .ci/lowest.sh's fast set.
pytestmark = pytest.mark.slow


def test_plan_reads_the_partition(slurm: SlurmCluster, home: Path, capsys) -> None:
    code, out, _ = cli(capsys, "plan", *SLURM, "--partition", "gpu", "--json")
    assert code == 0
    rec = json.loads(out)
    assert rec["resolved_parallelism"]["data_parallel_size"] == 2  # 1 node x gpu:h100:2
    assert "H100-80GB x2" in "\n".join(rec["header_lines"])
    code, out, err = cli(capsys, "plan", *SLURM, "--partition", "odd")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: gpu: partition odd: GPU type 'mystery'")
    assert "pass --gpu NAME" in err
    # The way out: name the GPU. And a CPU partition plans a rank per core (2 here).
    code, out, _ = cli(capsys, "plan", *SLURM, "--partition", "odd", "--gpu", "A100-80GB")
    assert code == 0 and "A100-80GB x1" in out
    code, out, _ = cli(capsys, "plan", *SLURM, "--partition", "debug", "--nodes", "2", "--json")
    assert code == 0 and json.loads(out)["resolved_parallelism"]["data_parallel_size"] == 4
    # Two nodes are planned as two: the network between them is part of the estimate.
    assert "nodes: 2 x 2 GPUs; NVLink within a node, 25 Gb/s per node across (ethernet " \
        "default)" in json.loads(out)["header_lines"]  # fmt: skip
    # In text: the partition read comes first; CPU ranks have no GPU-hour price.
    code, out, _ = cli(capsys, "plan", *SLURM, "--partition", "debug", "--nodes", "2")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("slurm: partition debug: 2 node(s) ("), lines
    assert "no GPUs" in lines[0]
    cost = next(ln for ln in lines if ln.startswith("cost: "))
    assert cost.endswith("on 4 CPU rank(s) of partition debug; no GPU-hour price"), cost
    assert "$" not in cost and "GPU-hours" not in cost
    assert any(ln.startswith("warning: partition debug has no GPUs: the job runs 4 CPU rank(s)")
               for ln in lines)  # fmt: skip
    code, out, _ = cli(capsys, "plan", *SLURM, "--partition", "gpu")
    assert out.startswith("slurm: partition gpu: 1 node(s) (127.0.0.3), 2 x gres gpu:h100:2")
    assert "/GPU-hour" in out  # a GPU partition keeps its price
    # The app's preflight of a Slurm launch: the partition's facts beside the plan.
    rows = jobs.preflight(load_job_config(), None, jobs.SlurmOptions("local", partition="gpu"))
    assert all(ok for _, ok, _ in rows), rows
    assert (
        "host",
        True,
        "slurm: partition gpu: 1 node(s) (127.0.0.3), 2 x gres gpu:h100:2, 8 CPUs, 67.1 GB each",
    ) in rows
    assert "dp=2" in dict((k, d) for k, _, d in rows)["plan"]
    # Where the ranks run, the partition's GPUs per node against the plan's (issue 35).
    assert rows[1] == ("device", True, "2 CUDA GPUs on partition gpu for the plan's 2 x H100-80GB")


def test_bad_partition_is_one_line_before_anything_is_made(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    code, out, err = cli(capsys, "launch", *SLURM, "--partition", "nope")
    assert (code, out) == (2, "")
    assert err == (
        "error: partition: nope: no such partition on the Slurm cluster of this machine; "
        "pass --partition with one of debug, gpu, odd\n"
    )
    assert not home.exists() or not list(home.glob("**/jobs/*")) and not (home / "remote").exists()
    assert slurm.jobs() == []


def test_dry_run_prints_the_script_and_submits_nothing(
    slurm: SlurmCluster, home: Path, tmp_path: Path, capsys
) -> None:
    config = tmp_path / "veri.toml"
    config.write_text('[slurm]\nlogin = "local"\npartition = "gpu"\ntime = "0:30:00"\n')
    code, out, err = cli(
        capsys,
        "launch",
        str(config),
        "--partition",
        "debug",
        "--account",
        "research",
        "--qos",
        "low",
        "--dry-run",
    )
    assert code == 0, err
    lines = out.splitlines()
    job_id = lines[1].removeprefix("#SBATCH --job-name=veri-")
    job_dir = slurm_job_dir(home, job_id)
    python = lines[-1].split()[3]
    assert lines == [
        "#!/bin/bash",
        f"#SBATCH --job-name=veri-{job_id}",
        "#SBATCH --partition=debug",  # the command line wins over veri.toml
        "#SBATCH --account=research",
        "#SBATCH --qos=low",
        "#SBATCH --time=0:30:00",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=2",  # a CPU partition: a core per rank, 2 per node
        f"#SBATCH --output={job_dir}/slurm-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@120",
        f"exec env PYTHONPATH={Path(__file__).resolve().parents[2]} {python} -m "
        f"veri_tui.jobfolder.supervise --job {job_dir}/job.json",
    ]
    assert not job_dir.parent.exists() and not (home / "remote").exists()
    assert slurm.jobs() == []
    code, _, err = cli(capsys, "launch", "--dry-run")
    assert code == 2 and err == "error: dry_run: prints a Slurm batch script: add --slurm LOGIN\n"
    code, _, err = cli(capsys, "launch", *SLURM, "--time", "soon", "--dry-run")
    assert code == 2 and err.startswith("error: slurm.time: 'soon': use Slurm's format")


#: The local 2-rank run's losses, run once for the module (both layouts compare with it).
_LOCAL: list[float] = []


def _same_losses_as_local(capsys, home: Path, *layout: str) -> str:
    """A local 2-rank run of 4 steps (once per module), then the same job with ``layout``
    through sbatch: the Slurm job's id, once its losses were found equal to the local run's."""
    steps = ("--set", "max_steps=4")
    if not _LOCAL:
        code, out, err = cli(capsys, "launch", "--gpu-count", "2", *steps, "--wait")
        assert code == 0, err
        _LOCAL.extend(losses(home / "jobs" / out.splitlines()[0]))
    local = _LOCAL
    code, out, err = cli(capsys, "launch", *SLURM, *layout, *steps, "--wait")
    assert code == 0, err + out
    job_id = out.splitlines()[0]
    assert losses(slurm_job_dir(home, job_id)) == pytest.approx(local, rel=1e-6)
    assert len(local) == 4
    return job_id


def test_two_ranks_through_sbatch_match_a_local_run(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    job_id = _same_losses_as_local(capsys, home, "--partition", "debug", "--gpus-per-node", "2")
    job_dir = slurm_job_dir(home, job_id)
    record = jobs.get_job(job_id)
    assert (record["status"], record["host"]) == ("succeeded", "slurm:local")
    entry = json.loads((home / "remote" / f"{job_id}.json").read_text())
    assert entry["kind"] == "slurm" and entry["handle"] == record["scheduler"]["id"]
    assert record["spec"]["slurm"]["partition"] == "debug"
    # The plan header as `plan --slurm` prints it: the partition read, then the model.
    log = (job_dir / "log.txt").read_text().splitlines()
    assert log[0].startswith("slurm: partition debug: "), log[:2]
    assert log[1].startswith("model: tiny-model (bundled)"), log[:2]
    assert (job_dir / "sbatch.sh").read_text().startswith("#!/bin/bash\n")
    code, out, _ = cli(capsys, "jobs")
    assert code == 0 and f"{job_id}  succeeded  slurm:local" in out
    # The batch script's last act writes the status; the controller may list the job as
    # completing a moment longer (seen once under a full suite's load).
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to leave the queue")
    assert not processes_of(job_dir)


def _running(home: Path, capsys, *more: str) -> tuple[str, Path]:
    code, out, err = cli(
        capsys, "launch", *SLURM, "--partition", "debug", "--gpus-per-node", "2", *LONG, *more
    )
    assert code == 0, err
    job_id = out.strip()
    job_dir = slurm_job_dir(home, job_id)
    wait_for(
        lambda: (
            b'"step"' in (job_dir / "log.txt").read_bytes()
            if (job_dir / "log.txt").exists()
            else False
        ),
        90,
        "the first step",
    )
    return job_id, job_dir


def test_cancel_leaves_no_slurm_job_and_no_process(slurm: SlurmCluster, home: Path, capsys) -> None:
    job_id, job_dir = _running(home, capsys)
    assert jobs.get_job(job_id)["scheduler"]["state"] == "RUNNING"
    assert processes_of(job_dir)
    code, out, _ = cli(capsys, "cancel", job_id)
    assert (code, out) == (0, f"job {job_id} cancelled\n")
    assert slurm.jobs() == [] and not processes_of(job_dir)
    record = jobs.get_job(job_id)
    assert record["status"] == "cancelled"
    assert (job_dir / "cancel.request").exists()
    # Slurm's own accounting agrees (it said FAILED NonZeroExitCode before).
    shown = slurm.run("scontrol", "show", "job", "-o", record["scheduler"]["id"])
    assert re.search(r"JobState=(CANCELLED|COMPLETED) ", shown), shown


def test_a_pending_job_shows_its_reason_and_cancel_and_resume_resubmit(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    # Partition gpu's node is down: the job waits in the queue with Slurm's reason.
    code, out, err = cli(capsys, "launch", *SLURM, "--partition", "gpu", "--set", "max_steps=1")
    assert code == 0, err
    job_id = out.strip()
    first = jobs.get_job(job_id)
    assert (first["status"], first["scheduler"]["state"]) == ("pending", "PENDING")
    wait_for(lambda: jobs.pending_reason(jobs.get_job(job_id)), 30, "a reason")
    # Slurm rewords a reason as its scheduler runs (ReqNodeNotAvail..., then "Nodes required
    # for job are DOWN, ..."): each output is checked for the reason it read itself.
    code, out, _ = cli(capsys, "jobs")
    assert re.search(rf"^{job_id}  pending \((\S[^)]*)\)  slurm:local  ", out, re.M), out
    code, out, _ = cli(capsys, "jobs", job_id)
    assert re.search(rf"^slurm: job {first['scheduler']['id']} PENDING, reason \S", out, re.M), out
    script = (slurm_job_dir(home, job_id) / "sbatch.sh").read_text()
    assert "#SBATCH --gpus-per-node=2\n" in script and "--cpus-per-task" not in script
    assert cli(capsys, "cancel", job_id)[:2] == (0, f"job {job_id} cancelled\n")
    assert slurm.jobs() == []
    # resume plans it again on the partition and submits it: a new Slurm job id, in the
    # registry and job.json, the same layout.
    code, _, err = cli(capsys, "resume", job_id, "--set", "learning_rate=0.001")
    assert code == 0, err
    again = jobs.get_job(job_id)
    assert again["status"] == "pending" and again["scheduler"]["id"] != first["scheduler"]["id"]
    spec = again["spec"]
    assert spec["hyperparameters"]["learning_rate"] == 0.001
    assert (spec["slurm"]["partition"], spec["gpu_count"], spec["gpu"]) == ("gpu", 2, "H100-80GB")
    assert slurm.jobs() == [again["scheduler"]["id"]]
    assert not (slurm_job_dir(home, job_id) / "cancel.request").exists()
    assert cli(capsys, "cancel", job_id)[0] == 0 and slurm.jobs() == []


@pytest.mark.trial
def test_two_nodes_one_rank_each_match_a_local_run(slurm: SlurmCluster, home: Path, capsys) -> None:
    # The batch job probes its two nodes first (veri_tui/jobfolder/probe/slurmprobe.py), then
    # trains.
    job_id = _same_losses_as_local(capsys, home, "--nodes", "2", "--gpus-per-node", "1")
    record = jobs.get_job(job_id)
    spec = record["spec"]
    assert (spec["nnodes"], spec["nproc_per_node"], spec["gpu_count"]) == (2, 1, 2)
    job_dir = slurm_job_dir(home, job_id)
    assert "veri_tui.jobfolder.probe.slurmprobe --job" in (job_dir / "sbatch.sh").read_text()
    probe = record["probe"]
    assert probe["internode_gbps"] > 0 and probe["refused"] == [] and probe["slow"] == []
    report = json.loads((job_dir / "probe.json").read_text())
    assert report["labels"] == ["127.0.0.1", "127.0.0.2"] and report["key"] == "slurm:debug"
    log = (job_dir / "log.txt").read_text()
    network = next(ln for ln in probe["lines"] if ln.startswith("network: "))
    assert log.index(network) < log.index('"step": 1')  # probed before the first step
    # The partition's probe cache has it: the next plan for 2 nodes of debug uses it.
    assert cached("slurm:debug")["internode_gbps"] == probe["internode_gbps"]
    code, out, _ = cli(capsys, "jobs", job_id)
    with capsys.disabled():
        print("\n" + out)
    assert re.search(r"^probe: measured \S+ \(the Slurm allocation, before training\):$", out,
                     re.M) and f"  {network}" in out, out  # fmt: skip


def test_a_job_over_its_time_limit_is_time_limit_customer(
    slurm: SlurmCluster, home: Path, capsys
) -> None:
    # Slurm's smallest limit is a minute, under the 120 s of `--signal=B:USR1@120`: the
    # supervisor gets SIGUSR1 at once, stops the ranks at a step boundary with a checkpoint
    # and records the time limit (the job side); had it not, Slurm's TIMEOUT would say it.
    started = time.monotonic()
    code, out, err = cli(capsys, "launch", *SLURM, "--gpus-per-node", "2", *LONG, "--time", "1")
    assert code == 0, err
    record = wait_ended(out.strip(), 150)
    print(f"time limit: ended {time.monotonic() - started:.0f} s after the launch")
    error = record["error"]
    assert (record["status"], error["code"], error["attribution"]) == (
        "failed",
        "TIME_LIMIT",
        "customer",
    )
    wait_for(lambda: slurm.jobs() == [], 30, "the Slurm job to end")
