"""`jobs.preflight` on this machine: the rows the app's launch screen shows, from the same
checks `launch` makes (a dry run of the job record), starting and keeping nothing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from veri_tui.bundled import assets_dir
from veri_tui.errors import VeriError
from veri_tui.launch import jobs
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.plan import load_job_config, plan_job

SAMPLE = str(BUNDLED_DATASETS["sft_text"])  # a model of your own needs a dataset (issue 35)

ASSETS = assets_dir()


def test_a_good_job_passes_every_check(home: Path, tmp_path: Path) -> None:
    job = load_job_config(None, gpu_count=2, output=str(tmp_path / "out"))
    plan = plan_job(job)
    rows = jobs.preflight(job, plan)
    disk, memory = rows.pop(7), rows.pop(7)  # what is free changes from run to run
    tokenizer = rows.pop(5)  # the class transformers picks (TokenizersBackend in 5.x)
    assert tokenizer[:2] == ("tokenizer", True)
    assert tokenizer[2].endswith(f" from {ASSETS / 'tiny-model'}")
    assert disk[:2] == ("disk", True) and disk[2].endswith(f"({plan.disk.parts()})")
    assert memory[:2] == ("host_memory", True) and memory[2].startswith("no offloaded states")
    assert rows == [
        ("plan", True, plan.plan_line.removeprefix("plan: ")),
        (
            "device",
            True,
            "warning: no CUDA GPU on this machine: the job runs 2 CPU processes "
            "(gloo) instead of the planned 2 x L4-24GB; the plan's memory, speed and cost figures "
            "are for those GPUs",
        ),
        ("model", True, str(ASSETS / "tiny-model")),
        ("dataset", True, str(BUNDLED_DATASETS["sft_text"])),
        ("output", True, str(tmp_path / "out")),
        ("rows", True, "64 rows, each with tokens to train on within 2048 tokens"),
        ("torch", True, "installed"),
    ]
    assert importlib.util.find_spec("torch") is not None  # what the torch row says
    assert jobs.preflight(job, None)[0] == rows[0]  # no plan given: planned here
    assert not home.exists() and not (tmp_path / "out").exists()  # nothing written


def test_every_refusal_is_a_row(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_bytes(b"x")
    job = load_job_config(
        None, gpu_count=2, dataset="/nope.jsonl", output=str(out), sets=["zero_stage=1"]
    )
    rows = jobs.preflight(job, None)
    failed = [(name, detail.split(";")[0]) for name, ok, detail in rows if not ok]
    # No plan for a refused job; the dataset and output are still checked; zero_stage is
    # refused by planning and by the launch checks, and shown once.
    assert failed == [
        ("zero_stage", "ZeRO-1 is not available"),
        ("dataset", "/nope.jsonl: no such file or folder"),
        ("output", f"{out} already exists and is not empty"),
    ]
    assert [name for name, ok, _ in rows if ok] == ["torch"]
    missing = load_job_config(None, model=str(tmp_path / "no-model"), dataset=SAMPLE)
    [(name, ok, detail)] = [r for r in jobs.preflight(missing, None) if not r[1]]
    assert name == "model" and detail.startswith(str(tmp_path / "no-model"))


def test_launch_without_a_plan_plans_here_first(home: Path, tmp_path: Path) -> None:
    job = load_job_config(None, model=str(tmp_path / "no-model"), dataset=SAMPLE)
    with pytest.raises(VeriError) as exc:
        jobs.launch(job, None)
    assert [e.key for e in exc.value.errors] == ["model"]
    assert not home.exists()  # refused before any folder was made
