"""eval_loss (issue 27): logged every eval_steps and at the end, and equal to a separate
evaluation of the saved model on the same rows. Two jobs in one 2-rank torchrun: a parquet
dataset with eval_fraction held out (full fine-tune), and an eval_dataset of its own (LoRA).

The first also reports to TensorBoard, trackio and wandb offline (`report_to`): what each
wrote in the job folder is read back (TensorBoard's EventAccumulator, trackio's own local
store, wandb's run file) and equals metrics.jsonl, whose lines carry Hugging Face Trainer's
names. wandb is left out where it is not installed (the README's test command installs it)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.datafiles import write_jsonl, write_parquet
from support.wandbfile import read_run
from trainer_jobs import DATASETS, TINY, metrics, run_many, write_job

from veri_tui.jobfolder.data.dataload import eval_split, mixed_rows
from veri_tui.jobfolder.data.source import sources_of
from veri_tui.trainer.data import encode_row
from veri_tui.trainer.losses import count_targets, sft_loss_sum

pytestmark = pytest.mark.slow
HAS_WANDB = importlib.util.find_spec("wandb") is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("eval")
    rows = [json.loads(line) for line in DATASETS["text"].read_text().splitlines() if line]
    data = write_parquet(root / "train.parquet", rows)
    held = write_jsonl(root / "held.jsonl", rows[:6])
    trackers = ["tensorboard", "trackio", *(["wandb"] if HAS_WANDB else [])]
    jobs = {
        "fraction": write_job(root / "fraction", dataset=data, max_steps=6, eval_steps=2,
                              eval_fraction=0.25, micro_batch_size=1, report_to=trackers,
                              env={"WANDB_MODE": "offline"}),
        "dataset": write_job(root / "dataset", dataset=DATASETS["text"], max_steps=3,
                             lora_rank=4, micro_batch_size=1),
    }  # fmt: skip
    spec = json.loads(jobs["dataset"].read_text())
    spec["spec"]["eval_datasets"] = [{"path": str(held)}]
    jobs["dataset"].write_text(json.dumps(spec))
    with pytest.MonkeyPatch.context() as env:
        for name in ("TRACKIO_DIR", "WANDB_DIR", "WANDB_SILENT"):  # the defaults
            env.delenv(name, raising=False)
        run_many(list(jobs.values()))
    return {name: job.parent for name, job in jobs.items()}


def _separate_eval(model: torch.nn.Module, rows: list) -> float:
    """The mean target-token loss of `rows`, one at a time, outside the trainer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY)
    examples = [encode_row(tok, r, w, "sft_text", 2048) for w, r in rows]
    with torch.no_grad():
        total = sum(float(sft_loss_sum(model, [e], tok.pad_token_id, torch.device("cpu")))
                    for e in examples)  # fmt: skip
    return total / count_targets(examples)


def test_eval_loss_every_eval_steps_and_at_the_end(runs: dict[str, Path]) -> None:
    lines = metrics(runs["fraction"])
    assert [m["step"] for m in lines if "eval_loss" in m] == [2, 4, 6]
    assert all(m["eval_loss"] > 0 for m in lines if "eval_loss" in m)
    log = (runs["fraction"] / "log.txt").read_text()
    assert "eval: " in log and "eval_loss every 2 steps and at the end" in log
    # No eval_steps: eval_loss once, with the last step
    assert [m["step"] for m in metrics(runs["dataset"]) if "eval_loss" in m] == [3]


def test_eval_loss_equals_a_separate_evaluation_of_the_saved_model(runs: dict[str, Path]) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    spec = json.loads((runs["fraction"] / "job.json").read_text())["spec"]
    rows = list(mixed_rows(sources_of(spec["dataset"])))
    held = [rows[i] for i in eval_split(len(rows), 0.25, 42)]
    full = AutoModelForCausalLM.from_pretrained(runs["fraction"] / "output", dtype=torch.bfloat16)
    final = metrics(runs["fraction"])[-1]["eval_loss"]
    assert _separate_eval(full, held) == pytest.approx(final, rel=2e-3)

    base = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.bfloat16)
    lora = PeftModel.from_pretrained(base, runs["dataset"] / "output")
    held_rows = list(mixed_rows(sources_of(str(runs["dataset"].parent / "held.jsonl"))))
    final = metrics(runs["dataset"])[-1]["eval_loss"]
    assert _separate_eval(lora, held_rows) == pytest.approx(final, rel=2e-3)


def test_metric_lines_have_hugging_face_names(runs: dict[str, Path]) -> None:
    lines = metrics(runs["fraction"])
    assert {"loss", "grad_norm", "learning_rate", "epoch"} <= set(lines[0]) and "lr" not in lines[0]
    # 48 training rows (64 less 16 held out), 2 a step: 24 steps an epoch
    assert [m["epoch"] for m in lines] == [round(s / 24, 4) for s in range(1, 7)]


def test_tensorboard_and_trackio_hold_what_metrics_jsonl_holds(runs: dict[str, Path]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lines = metrics(runs["fraction"])
    board = EventAccumulator(str(runs["fraction"] / "tracking" / "tensorboard"))
    board.Reload()
    for tag, key in (("train/loss", "loss"), ("train/learning_rate", "learning_rate"),
                     ("train/epoch", "epoch"), ("eval/loss", "eval_loss")):  # fmt: skip
        want = [(m["step"], m[key]) for m in lines if key in m]
        got = [(e.step, e.value) for e in board.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in want]
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # float32
    # trackio's own reader, on the store the job folder holds (TRACKIO_DIR is read at import)
    store = runs["fraction"] / "tracking" / "trackio"
    read = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
        "print(json.dumps([S.get_runs('veri-tui'), S.get_logs('veri-tui', sys.argv[1])]))"
    )
    out = subprocess.run([sys.executable, "-c", read, runs["fraction"].name], check=True,
                         env={**os.environ, "TRACKIO_DIR": str(store)}, capture_output=True,
                         text=True).stdout  # fmt: skip
    names, logged = json.loads(out.splitlines()[-1])
    assert names == [runs["fraction"].name]
    assert [r["step"] for r in logged] == [m["step"] for m in lines]
    assert [r["train/loss"] for r in logged] == [m["loss"] for m in lines]
    assert [r.get("eval/loss") for r in logged] == [m.get("eval_loss") for m in lines]


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (pip install 'veri-tui[wandb]')")
def test_wandb_offline_holds_what_metrics_jsonl_holds(runs: dict[str, Path]) -> None:
    job = runs["fraction"]
    lines = metrics(job)
    (run_dir,) = (job / "tracking" / "wandb").glob("offline-run-*")
    run = read_run(run_dir)
    assert (run["id"], run["project"]) == (job.name, "veri-tui")  # a resume continues this run
    assert run["config"]["method"] == "sft_text" and run["config"]["eval_steps"] == 2
    history = run["history"]
    assert [r["_step"] for r in history] == [m["step"] for m in lines]
    for tag, key in (("train/loss", "loss"), ("train/learning_rate", "learning_rate"),
                     ("train/epoch", "epoch"), ("eval/loss", "eval_loss")):  # fmt: skip
        assert [r.get(tag) for r in history] == [m.get(key) for m in lines]
    # The rank's log says where the run is and how to upload it
    log = (job / "log.txt").read_text()
    assert f"report_to: wandb (offline: {run_dir}; `wandb sync` that folder uploads it)" in log
