"""The job record built from a plan, and the headless commands' answers to bad input, all
without starting a job (the end-to-end file starts real ones)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_records import make_job

from veri_tui.bundled import assets_dir
from veri_tui.cli import main
from veri_tui.errors import VeriError
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.spec import build_record
from veri_tui.plan import load_job_config, plan_job

ASSETS = assets_dir()


def test_record_has_absolute_paths_defaults_and_the_plan_header(tmp_path: Path) -> None:
    job = load_job_config(None, method="dpo", gpu_count=2, sets=["lora_rank=4", "max_steps=3"])
    plan = plan_job(job)
    rec = build_record(job, plan, "20261129-000001-aaaa", tmp_path / "job")
    spec = rec["spec"]
    assert rec["status"] == "pending" and rec["host"] is None and rec["error"] is None
    assert spec["model_path"] == str(ASSETS / "tiny-model")
    assert spec["dataset"] == str(BUNDLED_DATASETS["dpo"])
    assert spec["output_dir"] == str(tmp_path / "job" / "output")
    assert (spec["gpu_count"], spec["nproc_per_node"], spec["device"]) == (2, 2, "auto")
    assert spec["plan_header"] == plan.lines()
    assert spec["hyperparameters"]["lora_rank"] == 4 and spec["hyperparameters"]["max_steps"] == 3
    assert rec["resolved_parallelism"] == spec["resolved_parallelism"]
    assert spec["resolved_parallelism"] == plan.to_dict()["resolved_parallelism"]
    json.dumps(rec)  # plain JSON all the way down


def test_remote_record_is_the_local_layout_with_the_host_paths(tmp_path: Path) -> None:
    from veri_tui.launch.host import HostFacts as Preflight
    from veri_tui.launch.launching import host_record
    from veri_tui.launch.ssh.host import SshHost

    job = load_job_config(None, gpu_count=2, sets=["max_steps=3"])
    plan = plan_job(job)
    local = build_record(job, plan, "20261129-000001-aaaa", tmp_path / "job")
    facts = {"python": "3.11.7", "torch": "2.6.0", "disk_free_bytes": 10**10, "disk_path": "/"}
    pf = Preflight("gpu-box", "python3", facts, "/home/u", "/home/u/.veri")
    job_dir = "/home/u/.veri/jobs/20261129-000001-aaaa"
    remote = host_record(SshHost("gpu-box"), pf, job, plan, "20261129-000001-aaaa", job_dir)
    assert remote.pop("preflight") == pf.summary()
    paths = ("model", "model_path", "dataset", "datasets", "output_dir")
    assert {k: remote["spec"].pop(k) for k in paths} == {
        "model": "tiny-model (bundled)",
        "model_path": f"{job_dir}/model",
        # Source k of the mixture in data/<k>/ under its own name (issue 27)
        "dataset": f"{job_dir}/data/0/sft.jsonl",
        "datasets": [{"path": f"{job_dir}/data/0/sft.jsonl"}],
        "output_dir": f"{job_dir}/output",
    }
    assert remote.pop("host") == "gpu-box"
    # Everything else is the local record's: same keys, same plan, same hyperparameters
    # (created_at aside: the two may fall in different seconds).
    for rec in (local, remote):
        rec.pop("created_at")
    local.pop("host")
    local["spec"] = {k: v for k, v in local["spec"].items() if k not in paths}
    assert remote == local


def test_model_known_only_from_hub_metadata_is_refused(tmp_path: Path) -> None:
    job = load_job_config(None, gpu_count=1, dataset=str(BUNDLED_DATASETS["sft_text"]))
    plan = plan_job(job)
    hub_only = SimpleNamespace(to_dict=lambda: dict(plan.to_dict(), model={"path": None}))
    with pytest.raises(VeriError) as exc:
        build_record(job.copy_with(update={"model": "Qwen/Qwen3-0.6B"}), hub_only, "x", tmp_path)
    assert exc.value.lines() == [
        "error: model: Qwen/Qwen3-0.6B is not on this machine (only its Hub metadata was read); "
        "download it (huggingface-cli download Qwen/Qwen3-0.6B) or pass --model DIR"
    ]


def test_launch_refuses_every_problem_at_once_and_starts_nothing(home, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_bytes(b"x")
    argv = ["launch", "--gpu-count", "2", "--set", "zero_stage=1", "--dataset", "/nope.jsonl"]
    assert main([*argv, "--output", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [ln.split(":")[1].strip() for ln in err] == ["zero_stage", "dataset", "output"]
    assert err[1] == (
        "error: dataset: /nope.jsonl: no such file or folder; pass a dataset file, a "
        "save_to_disk folder or a Hub id (org/name)"
    )
    assert not (home / "jobs").exists()


def test_launch_refuses_a_missing_model_path(home: Path, tmp_path: Path, capsys) -> None:
    data = str(BUNDLED_DATASETS["sft_text"])
    argv = ["launch", "--model", str(tmp_path / "no-model"), "--dataset", data, "--gpu-count", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: model: {tmp_path / 'no-model'}")
    assert not (home / "jobs").exists()


def test_launch_without_a_dataset_is_refused_for_your_model(home, tmp_path, capsys) -> None:
    # Issue 35: a model of your own would train on the bundled 64-row toy sample and "succeed".
    import shutil

    mine = shutil.copytree(ASSETS / "tiny-model", tmp_path / "my-model")
    assert main(["launch", "--model", str(mine)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: dataset: no dataset given: pass --dataset FILE (JSONL, ")
    assert not (home / "jobs").exists()
    # The bundled models keep their sample: nothing refused for them (a dry run of the paths).
    for model in (None, str(ASSETS / "tiny-model"), str(ASSETS / "tiny-moe")):
        job = load_job_config(None, model=model)
        record = build_record(job, plan_job(job), "x", tmp_path / "job")
        assert record["spec"]["dataset"] == str(BUNDLED_DATASETS["sft_text"])


@pytest.mark.parametrize("argv", [["logs", "nope"], ["logs", "nope", "-f"], ["cancel", "nope"]])
def test_unknown_job_is_one_error_line_and_exit_2(home, capsys, argv) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == "error: job: no job nope; `veri-tui jobs` lists them\n"


def test_jobs_logs_and_cancel_read_the_folder(home: Path, capsys) -> None:
    assert main(["jobs"]) == 0
    assert "no jobs yet" in capsys.readouterr().out
    job_dir = make_job(home, "20261129-000001-aaaa", status="failed")
    rec = json.loads((job_dir / "job.json").read_text())
    rec["spec"].update(method="sft_text", gpu="L4-24GB", model="/m/tiny-model/")
    rec["error"] = {"code": "CUDA_OOM", "summary": "rank 1/2 (node 0, local_rank 1) failed: X"}
    (job_dir / "job.json").write_text(json.dumps(rec))
    metric = '{"step": 1, "total_steps": 2, "loss": 2.5, "learning_rate": 9.96057350657239e-05}'
    raw = f'plan: dp=2\n{{"step": 1}}\n{metric}\nlast, no newline'
    (job_dir / "log.txt").write_text(raw)
    assert main(["jobs"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["JOB", "STATUS", "HOST", "METHOD", "GPUS", "MODEL", "ERROR"]
    assert table[1].split() == [
        "20261129-000001-aaaa",
        "failed",
        "local",
        "sft_text",
        "2x",
        "L4-24GB",
        "tiny-model",
        "CUDA_OOM",
    ]
    assert main(["jobs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["error"]["code"] == "CUDA_OOM"
    # The metric line as the app's row (no loss: not a metric line); --json keeps it raw.
    rows = ["plan: dp=2", '{"step": 1}', "step 1/2  loss 2.5  lr 1.0e-04", "last, no newline"]
    assert main(["logs", "20261129-000001-aaaa"]) == 0
    assert capsys.readouterr().out == "\n".join(rows)
    assert main(["logs", "20261129-000001-aaaa", "-f"]) == 0  # ended: prints all, returns
    assert capsys.readouterr().out.splitlines() == rows
    assert main(["logs", "20261129-000001-aaaa", "--json"]) == 0
    assert capsys.readouterr().out == raw
    assert main(["logs", "20261129-000001-aaaa", "-f", "--json"]) == 0
    assert capsys.readouterr().out.splitlines() == raw.splitlines()
    assert main(["cancel", "20261129-000001-aaaa"]) == 0
    assert "had already ended: failed" in capsys.readouterr().out


def test_job_side_imports_stay_light() -> None:
    # The supervisor runs on a GPU image without pydantic/paramiko/textual and must start fast;
    # the launch side never loads textual, nor paramiko until a host is used.
    code = (
        "import sys, json\n"
        "import veri_tui.jobfolder.supervise.supervisor, veri_tui.jobfolder.failures.failures\n"
        "heavy = ('torch', 'pydantic', 'paramiko', 'textual')\n"
        "sup = sorted(m for m in heavy if m in sys.modules)\n"
        "import veri_tui.launch.jobs, veri_tui.commands.jobs, veri_tui.commands.launch\n"
        "rest = sorted(m for m in heavy if m != 'pydantic' and m in sys.modules)\n"
        "print(json.dumps([sup, rest]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[], []]
