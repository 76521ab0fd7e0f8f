"""Measured after every run: a rank's run measurements (veri_tui/trainer/runstats.py, real tensors
on CPU; CUDA's counters mocked), the supervisor's gathering into job.json `measured`
(veri_tui/jobfolder/supervise/jobstats.py), and `veri-tui jobs JOB` setting them beside `predicted`
with ratios. The real 2-rank job's `measured`/`predicted` are checked in test_end_to_end.py's
success test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from veri_tui.cli import main
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.supervise.jobstats import gather, record_measured
from veri_tui.launch.measured import comparison, comparison_lines
from veri_tui.trainer.report import RankContext
from veri_tui.trainer.runstats import RunStats, steady_rate

SPEC = {"gpu": "H100-80GB", "gpu_count": 2}


def _rank_file(job_dir: Path, rank: int, **fields) -> None:
    base = {"device": "cuda", "final": True, "steps": 5, "steps_timed": 3, "warmup_steps": 2}
    path = job_dir / "measured" / f"run-rank-{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, {**base, "rank": rank, **fields})


def test_runstats_counts_the_states_of_a_real_step(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3).to(torch.bfloat16)  # 15 parameters, 30 bytes
    opt = torch.optim.AdamW(model.parameters())
    stats = RunStats(RankContext(1, 1, 0, 2, tmp_path), torch.device("cpu"), zero_stage=0)
    for step, seconds in enumerate([4.0, 2.0, 1.0, 0.5, 1.0]):
        model(torch.ones(2, 4, dtype=torch.bfloat16)).sum().backward()
        opt.step()
        stats.after_update(model, opt, None)
        opt.zero_grad(set_to_none=True)
        stats.step_done(100.0, seconds)
        if step == 0:  # written after the first step already
            first = json.loads((tmp_path / "measured" / "run-rank-1.json").read_text())
            assert first["final"] is False and first["states_bytes"] == 30 + 30 + 68
    got = stats.write()
    # AdamW: exp_avg and exp_avg_sq in bf16 (2 x 30 bytes) and a float32 step per tensor.
    assert got["states"] == {"params": 30, "grads": 30, "optimizer": 68}
    assert got["tokens_per_s"] == 100.0  # median of 100, 200, 100 (steps 3-5)
    assert (got["steps_timed"], got["warmup_steps"], got["step_time_s"]) == (3, 2, 1.0)
    assert got["peak_source"] == "VmHWM" and got["peak_bytes"] > 10**7
    assert steady_rate([5.0, 7.0]) == (6.0, 2)  # too short for a warm-up: every step counts


def test_runstats_reads_cuda_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: 7_000)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d=None: 9_000)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    stats = RunStats(RankContext(0, 0, 0, 1, tmp_path), torch.device("cuda", 0), zero_stage=3)
    got = stats.record(final=True)
    assert (got["peak_bytes"], got["peak_reserved_bytes"]) == (7_000, 9_000)
    assert got["device_name"] == "NVIDIA H100 80GB HBM3" and got["tokens_per_s"] is None


def test_gather_takes_the_fullest_rank_and_rank_0s_rate(tmp_path: Path) -> None:
    assert gather(tmp_path, SPEC) is None  # ended before the first step
    _rank_file(tmp_path, 0, states_bytes=100, peak_bytes=500, peak_reserved_bytes=600,
               tokens_per_s=1000.0, step_time_s=2.0, device_name="NVIDIA H100")  # fmt: skip
    _rank_file(tmp_path, 1, states_bytes=110, peak_bytes=700, peak_reserved_bytes=650,
               tokens_per_s=900.0, final=False)  # fmt: skip
    (tmp_path / "measured" / "run-rank-2.json").write_text('{"torn')  # skipped
    (tmp_path / "measured" / "rank-0.json").write_text("{}")  # VERI_MEASURE_STATES's, not ours
    got = gather(tmp_path, SPEC)
    assert got is not None
    assert (got["ranks"], got["gpu"], got["final"]) == (2, "H100-80GB", False)
    assert (got["peak_bytes"], got["peak_reserved_bytes"]) == (700, 650)
    assert (got["states_bytes"], got["states_bytes_per_rank"]) == (110, [100, 110])
    assert (got["tokens_per_s"], got["step_time_s"]) == (1000.0, 2.0)
    _rank_file(tmp_path, 0, device="cpu", peak_bytes=5)
    assert gather(tmp_path, SPEC)["gpu"] == "cpu"  # a CPU run never counts as the GPU's


def test_record_measured_writes_job_json_and_never_raises(tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    assert record_measured(job) is None  # no job.json: nothing, no exception
    write_json_atomic(job, {"job_id": "x", "status": "running", "spec": SPEC})
    _rank_file(tmp_path, 0, states_bytes=1, peak_bytes=2, tokens_per_s=3.0)
    assert record_measured(job)["peak_bytes"] == 2
    assert json.loads(job.read_text())["measured"]["tokens_per_s"] == 3.0


PREDICTED = {"gpu": "H100-80GB", "states_bytes": 2e9, "peak_bytes": 4e9, "tokens_per_s": 2000.0,
             "step_time_s": 1.0}  # fmt: skip
MEASURED = {"device": "cuda", "gpu": "H100-80GB", "device_name": "NVIDIA H100 80GB HBM3",
            "ranks": 2, "states_bytes": 2e9, "peak_bytes": 5e9, "peak_source": "cuda",
            "tokens_per_s": 1000.0, "step_time_s": 2.0, "steps_timed": 8,
            "warmup_steps": 2}  # fmt: skip


def test_comparison_rows_and_ratios() -> None:
    record = {"predicted": PREDICTED, "measured": MEASURED}
    assert comparison(record) == [
        ("states/GPU", "2.00 GB", "2.00 GB", "1x"),
        ("peak memory/GPU", "4.00 GB", "5.00 GB", "1.25x"),
        ("tokens/s", "2,000 tok/s", "1,000 tok/s", "0.5x"),
        ("step time", "1.000 s", "2.000 s", "2x"),
    ]
    only_plan = comparison_lines({"predicted": PREDICTED, "measured": None})
    assert only_plan[-1].startswith("measured: nothing")
    assert comparison_lines({}) == []


def test_jobs_job_prints_predicted_beside_measured(home: Path, capsys) -> None:
    folder = home / "jobs" / "20261201-000000-abcd"
    folder.mkdir(parents=True)
    spec = {**SPEC, "method": "sft_text", "model": "m", "plan_header": ["plan: dp=2 zero_stage=3"]}
    record = {"job_id": folder.name, "status": "succeeded", "host": None, "spec": spec}
    write_json_atomic(folder / "job.json", {**record, "predicted": PREDICTED, "measured": MEASURED})
    assert main(["jobs", folder.name]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == [folder.name, "succeeded"] and out[1] == "plan: dp=2 zero_stage=3"
    assert out[2].split() == ["predicted", "measured", "ratio"]
    assert out[5].split() == ["tokens/s", "2,000", "tok/s", "1,000", "tok/s", "0.5x"]
    assert "measured on NVIDIA H100 80GB HBM3 x2, planned for H100-80GB" in out[-2]
    assert out[-1].startswith("gpu-hours: predicted ")  # tests/plan/test_cost.py checks it
    assert main(["jobs", folder.name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["measured"] == MEASURED
    assert main(["jobs", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: job: no job nope")


def test_a_running_job_shows_what_its_ranks_measured_so_far(home: Path, capsys) -> None:
    """job.json's `measured` is written when an attempt ends; until then (and for a job
    requeued or refused a restart) `jobs JOB` reads the ranks' files, as they stand."""
    folder = home / "jobs" / "20261201-000000-run1"
    spec = {**SPEC, "method": "sft_text", "model": "m", "plan_header": ["plan: dp=2"]}
    record = {"job_id": folder.name, "status": "running", "host": None, "spec": spec,
              "predicted": PREDICTED, "measured": None}  # fmt: skip
    folder.mkdir(parents=True)
    write_json_atomic(folder / "job.json", record)
    supervisor = subprocess.Popen(["sleep", "300"])  # alive: the job is not lost
    (folder / "supervisor.pid").write_text(f"{supervisor.pid}\n")  # (home's teardown kills it)
    for rank in (0, 1):
        _rank_file(folder, rank, final=False, steps=7, states_bytes=2 * 10**9,
                   peak_bytes=(4 + rank) * 10**9, tokens_per_s=1000.0)  # fmt: skip
    assert main(["jobs", folder.name]) == 0
    out = capsys.readouterr().out
    assert "measured: nothing" not in out
    assert "measured so far (7 steps) on H100-80GB x2" in out
    assert "peak memory/GPU" in out and "5.00 GB" in out
    assert json.loads((folder / "job.json").read_text())["measured"] is None  # reads write nothing


def test_a_multinode_jobs_measured_covers_every_node(tmp_path: Path) -> None:
    """Each node's supervisor gathers its own node's ranks; the job's record has them all."""
    from veri_tui.launch.local_host import LocalHost
    from veri_tui.launch.target import JobTarget, Node

    spec = {**SPEC, "gpu_count": 2, "nproc_per_node": 1}
    nodes = []
    for k in (0, 1):
        folder = tmp_path / f"j-node{k}"
        folder.mkdir()
        _rank_file(folder, k, states_bytes=(1 + k) * 10**9, peak_bytes=(3 + k) * 10**9,
                   tokens_per_s=500.0 if k == 0 else None)  # fmt: skip
        own = gather(folder, spec)
        assert own is not None and own["ranks"] == 1
        write_json_atomic(folder / "job.json", {"job_id": "j", "status": "succeeded",
                                                "spec": spec, "measured": own})  # fmt: skip
        nodes.append(Node(LocalHost(), str(folder)))
    record = JobTarget("j", nodes, None).get_job()
    measured = record["measured"]
    assert measured["ranks"] == 2 and measured["states_bytes_per_rank"] == [10**9, 2 * 10**9]
    assert measured["peak_bytes"] == 4 * 10**9  # node 1's, the fullest
    assert measured["tokens_per_s"] == 500.0  # rank 0's


def test_jobs_job_names_the_failed_rank_its_node_and_whose_fault(home: Path, capsys) -> None:
    folder = home / "jobs" / "20261201-000000-fail"
    folder.mkdir(parents=True)
    error = {
        "code": "RANK_LOST",
        "attribution": "platform",
        "rank": 1,
        "world_size": 2,
        "node": 1,
        "local_rank": 0,
        "message": "killed by signal 9 (SIGKILL)",
        "summary": "rank 1/2 (node 1, local_rank 0) failed: killed by signal 9 (SIGKILL)",
    }
    record = {"job_id": folder.name, "status": "failed", "host": None, "error": error,
              "spec": {**SPEC, "plan_header": ["plan: dp=2"]},
              "nodes": [{"node": 0, "host": "n0", "status": "cancelled"},
                        {"node": 1, "host": "n1", "status": "failed"}]}  # fmt: skip
    write_json_atomic(folder / "job.json", record)
    assert main(["jobs", folder.name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "error: RANK_LOST (platform): rank 1/2 (node 1, local_rank 0) failed: killed by "
        "signal 9 (SIGKILL); node 1 is n1"
    )
    no_summary = {k: v for k, v in error.items() if k != "summary"}
    write_json_atomic(folder / "job.json", {**record, "error": no_summary, "nodes": []})
    assert main(["jobs", folder.name]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "error: RANK_LOST (platform): rank 1/2 (node 1, local_rank 0): killed by signal 9 (SIGKILL)"
    )
