"""Real 2-rank torchrun jobs (gloo): every stage, precision, LoRA, cpu_offload, sft and dpo,
and every activation checkpointing mode.

Each job's artifact must load with transformers (or peft), generate, and hold exactly the
weights the run trained: the tensors of the final DCP checkpoint (step 4 of 4), which differ
from the initial model's. The dpo LoRA job is also the reference for a LoRA resume.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from trainer_jobs import TINY, checkpoint_tensors, metrics, run_many, run_trainer, write_job

STEPS = 4
CASES = {
    # name: (method, dataset, zero_stage, precision, lora_rank, cpu_offload)
    "sft-text-z0-bf16": ("sft_text", "text", 0, "bf16", 0, False),
    "sft-messages-z2-fp32-lora-offload": ("sft_text", "messages", 2, "fp32", 4, True),
    "sft-prompt-z3-bf16-lora": ("sft_text", "prompt_completion", 3, "bf16", 4, False),
    "sft-text-z3-fp32-offload": ("sft_text", "text", 3, "fp32", 0, True),
    "dpo-z2-bf16-full": ("dpo", "dpo", 2, "bf16", 0, False),
    "dpo-z0-fp32-lora": ("dpo", "dpo", 0, "fp32", 4, False),
}
ACCUMULATE = {"sft-text-z3-fp32-offload": {"micro_batch_size": 1, "gradient_accumulation_steps": 2}}
# Every checkpointing mode trains somewhere (the rest run "full", gradient_checkpointing on).
CHECKPOINTING = {
    "sft-text-z0-bf16": {"gradient_checkpointing": False},
    "sft-prompt-z3-bf16-lora": {"activation_checkpointing": "selective"},
    "dpo-z2-bf16-full": {"activation_checkpointing": "selective"},
}
# Hugging Face Trainer's names (loss, learning_rate, grad_norm, epoch) and veri-tui's own
METRIC_KEYS = {"step", "total_steps", "loss", "learning_rate", "grad_norm", "epoch",
               "tokens_per_s", "peak_mem_bytes"}  # fmt: skip
REWARD_KEYS = {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    jobs = {}
    for name, (method, data, stage, precision, lora, offload) in CASES.items():
        jobs[name] = write_job(
            root / name,
            method=method,
            dataset=data,
            zero_stage=stage,
            precision=precision,
            lora_rank=lora,
            cpu_offload=offload,
            max_steps=STEPS,
            checkpoint_steps=2,
            # One FSDP2 job accumulates: no gradient sync until its last micro-batch.
            **ACCUMULATE.get(name, {"micro_batch_size": 2}),
            **CHECKPOINTING.get(name, {}),
        )
    run_many(list(jobs.values()))
    return {name: job.parent for name, job in jobs.items()}


def _prompt_ids(path: Path) -> torch.Tensor:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    return tok("Question: What color is the fox? Answer:", return_tensors="pt")["input_ids"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(CASES))
def test_log_starts_with_plan_then_one_metric_per_step(runs: dict[str, Path], name: str) -> None:
    job_dir = runs[name]
    header = json.loads((job_dir / "job.json").read_text())["spec"]["plan_header"]
    lines = (job_dir / "log.txt").read_text().splitlines()
    assert lines[: len(header)] == header
    assert header[-1].startswith("plan: dp=2 zero_stage=")
    mode = CHECKPOINTING.get(name, {})
    shown = "off" if mode.get("gradient_checkpointing") is False else "on"
    shown = "selective" if mode.get("activation_checkpointing") == "selective" else shown
    assert f" gradient_checkpointing={shown} " in header[-1]
    rows = metrics(job_dir)
    assert [m["step"] for m in rows] == list(range(1, STEPS + 1))
    keys = METRIC_KEYS | (REWARD_KEYS if CASES[name][0] == "dpo" else set())
    assert all(set(m) == keys and m["total_steps"] == STEPS for m in rows)
    logged = [json.loads(x) for x in lines if x.startswith("{")]
    assert logged == rows
    offload_note = any(x.startswith("cpu_offload:") for x in lines)
    assert offload_note == CASES[name][5]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[0] == "dpo"])
def test_dpo_metric_lines_carry_trl_rewards(runs: dict[str, Path], name: str) -> None:
    """rewards/*: beta x (policy - reference) sequence log-probs, means over the step's 4 pairs
    (2 ranks x mbs 2). At step 1 the policy still is the reference (the same weights; LoRA's B
    starts at zero): all zero and the loss is ln 2. The loss is the mean of -log sigmoid of
    the pairs' margins, so it is at least -log sigmoid(mean margin) (convexity)."""
    rows = metrics(runs[name])
    pairs = json.loads((runs[name] / "job.json").read_text())["spec"]["resolved_parallelism"]
    assert pairs["global_batch_size"] == 4
    first = rows[0]
    assert [first[k] for k in sorted(REWARD_KEYS)] == [0.0, 0.0, 0.0, 0.0]
    assert abs(first["loss"] - math.log(2)) < 1e-6
    for m in rows:
        chosen, rejected, margins = m["rewards/chosen"], m["rewards/rejected"], m["rewards/margins"]
        assert abs(margins - (chosen - rejected)) <= 2e-6
        assert 0 <= m["rewards/accuracies"] <= 1 and (4 * m["rewards/accuracies"]).is_integer()
        assert m["loss"] >= -math.log(1 / (1 + math.exp(-margins))) - 1e-5
    assert any(abs(m["rewards/chosen"]) > 1e-4 for m in rows[1:])  # training moved the policy
    assert any(m["rewards/accuracies"] > 0 for m in rows[1:])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[4]])
def test_full_artifact_loads_generates_and_holds_trained_weights(
    runs: dict[str, Path], name: str
) -> None:
    from transformers import AutoModelForCausalLM

    out = runs[name] / "output"
    precision = CASES[name][3]
    model = AutoModelForCausalLM.from_pretrained(out)
    ids = _prompt_ids(out)
    gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > ids.shape[1]
    saved = load_file(out / "model.safetensors")
    trained = checkpoint_tensors(runs[name] / "checkpoints" / f"step-{STEPS}")
    init = load_file(TINY / "model.safetensors")
    assert set(saved) == set(trained) == set(init)
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    for key, value in saved.items():
        assert value.dtype == want, key
        assert torch.equal(value, trained[key]), key
    assert not torch.equal(saved["lm_head.weight"], init["lm_head.weight"].to(want))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[4]])
def test_lora_adapter_loads_generates_and_holds_trained_weights(
    runs: dict[str, Path], name: str
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = runs[name] / "output"
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    base = AutoModelForCausalLM.from_pretrained(TINY)
    model = PeftModel.from_pretrained(base, out)
    ids = _prompt_ids(out)
    assert model.generate(input_ids=ids, max_new_tokens=4, do_sample=False).shape[1] > ids.shape[1]
    saved = load_file(out / "adapter_model.safetensors")
    trained = {
        k.replace(".default", ""): v
        for k, v in checkpoint_tensors(runs[name] / "checkpoints" / f"step-{STEPS}").items()
    }
    assert set(saved) == set(trained) and len(saved) == 2 * 7 * 2  # A and B, 7 targets, 2 layers
    for key, value in saved.items():
        assert torch.equal(value, trained[key]), key
    b = [v for k, v in saved.items() if "lora_B" in k]
    assert any(v.abs().sum() > 0 for v in b)  # B starts at zero: nonzero means it trained


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lora_resume_matches_the_uninterrupted_run(runs: dict[str, Path], tmp_path: Path) -> None:
    """LoRA checkpoints hold only the adapters (the frozen base is the model folder): a new
    job given the dpo LoRA run's step-2 checkpoint resumes from it and reproduces that run's
    steps 3 and 4. (Killing a job mid-save is tested in test_trainer_checkpoints.py.)"""
    source = runs["dpo-z0-fp32-lora"]
    spec = json.loads((source / "job.json").read_text())
    spec["spec"]["hyperparameters"]["resume"] = True
    spec["spec"]["output_dir"] = str(tmp_path / "resumed" / "output")
    (tmp_path / "resumed" / "checkpoints").mkdir(parents=True)
    step2 = tmp_path / "resumed" / "checkpoints" / "step-2"
    shutil.copytree(source / "checkpoints" / "step-2", step2)
    names = set(checkpoint_tensors(step2))
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    (step2.parent / "step-2.pt").unlink()
    job = tmp_path / "resumed" / "job.json"
    job.write_text(json.dumps(spec))
    proc = run_trainer(job, 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resume: from checkpoint step-2" in (tmp_path / "resumed" / "log.txt").read_text()
    got, want = metrics(tmp_path / "resumed"), metrics(source)
    assert [m["step"] for m in got] == [3, 4]
    assert [m["loss"] for m in got] == [m["loss"] for m in want[2:]]
