"""`veri-tui plan`: header, plan line, --json record, pin round trip, errors as one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.plan import PIN_KEYS, job_from_fields, plan, plan_job

PLAN_RE = re.compile(
    r"^plan: dp=\d+ zero_stage=[023] tp=1 cp=1 mbs=\d+ grad_acc=\d+ gbs=\d+ "
    r"precision=(bf16|fp32) gradient_checkpointing=(on|off) "
    r"\((auto|requested): \d+\.\d GB states/GPU\)$"
)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_seed_example_line(model_dirs: dict[str, Path], capsys) -> None:
    code, out, _ = run_cli(
        capsys, "--model", str(model_dirs["llama-3.1-8b"]), "--gpu", "L4-24GB", "--gpu-count", "8"
    )
    assert code == 0
    lines = out.splitlines()
    plan_lines = [x for x in lines if x.startswith("plan: ")]
    assert plan_lines == [
        "plan: dp=8 zero_stage=3 tp=1 cp=1 mbs=1 grad_acc=1 gbs=8 precision=bf16 "
        "gradient_checkpointing=on (auto: 8.0 GB states/GPU)"
    ]
    i = lines.index(plan_lines[0])
    assert [x.split(":")[0] for x in lines[:i]] == ["model", "budget", "decision"]
    assert "8,030,261,248 parameters" in lines[0]
    assert "15.3 GB/GPU on L4-24GB x8" in lines[1]


def test_json_record(model_dirs: dict[str, Path], capsys) -> None:
    code, out, _ = run_cli(
        capsys, "--model", str(model_dirs["qwen3-0.6b"]), "--gpu-count", "4", "--json"
    )
    assert code == 0
    rec = json.loads(out)
    for key in (
        "parameter_count",
        "trainable_parameter_count",
        "budget_bytes",
        "states_bytes_per_gpu",
        "host_bytes_per_node",
        "fits",
        "header_lines",
        "plan_line",
        "warnings",
        "suggestions",
        "activations",
        "throughput",
        "resolved_parallelism",
        "job",
        "model",
    ):
        assert key in rec, key
    rp = rec["resolved_parallelism"]
    for key in (*PIN_KEYS, "zero_stage_requested", "memory_estimate", "decision_trace"):
        assert key in rp, key
    assert rp["zero_stage"] == 0 and rp["zero_stage_requested"] == "auto"
    assert rec["states_bytes_per_gpu"] == 8 * 596_049_920
    assert PLAN_RE.match(rec["plan_line"])
    assert rec["model"]["path"] == str(model_dirs["qwen3-0.6b"].resolve())


@pytest.mark.parametrize(
    "knobs",
    [
        {"gpu_count": 4},
        {"gpu_count": 8, "model": "llama-3.1-8b"},
        {"gpu_count": 4, "global_batch_size": 32, "precision": "fp32"},
        {"gpu_count": 2, "lora_rank": 16, "method": "dpo", "micro_batch_size": 2},
        {"gpu_count": 4, "cpu_offload": True, "model": "llama-3.1-70b"},
        {"gpu_count": 1, "gradient_checkpointing": False},
    ],
)
def test_pin_round_trip(model_dirs: dict[str, Path], knobs: dict) -> None:
    knobs = dict(knobs)
    model = str(model_dirs[knobs.pop("model", "qwen3-0.6b")])
    first = plan(model=model, **knobs)
    pinned = plan(model=model, **{**knobs, **first.pinned_hyperparameters()})
    for key in PIN_KEYS:
        assert pinned.resolved_parallelism[key] == first.resolved_parallelism[key], key
    assert pinned.states_bytes_per_gpu == first.states_bytes_per_gpu
    assert pinned.plan_line.split(" (")[0] == first.plan_line.split(" (")[0]
    assert "(requested: " in pinned.plan_line


def test_errors_are_one_line_each(capsys) -> None:
    code, out, err = run_cli(
        capsys, "--gpu-count", "4", "--set", "zero_stage=1", "--set", "data_parallel_size=2"
    )
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "error: data_parallel_size: TP*CP*DP*PP=2 != WORLD_SIZE=4; set data_parallel_size to 4 "
        "(= gpu_count) or leave it unset",
        "error: zero_stage: ZeRO-1 is not available; use zero_stage 2, which costs no extra "
        "communication",
    ]


def test_refusals_of_parsed_keys_show_beside_parse_errors(capsys) -> None:
    code, _, err = run_cli(capsys, "--set", "zero_stage=1", "--set", "gloabl_batch_size=3")
    assert code == 2
    assert err.splitlines() == [
        "error: gloabl_batch_size: unknown key; did you mean 'global_batch_size'?",
        "error: zero_stage: ZeRO-1 is not available; use zero_stage 2, which costs no extra "
        "communication",
    ]
    # A rule that reads a key whose value is not known waits: gpu_cont=4 was meant as
    # gpu_count, so zero_stage 3 is not refused "on one GPU"; precision reads nothing else.
    code, _, err = run_cli(
        capsys, "--set", "gpu_cont=4", "--set", "zero_stage=3", "--set", "precision=fp8"
    )
    assert [line.split(":")[1].strip() for line in err.splitlines()] == ["gpu_cont", "precision"]
    code, _, err = run_cli(
        capsys, "--set", "zero_stage", "--set", "gpu_count=1", "--set", "cpu_offload=true"
    )
    assert [line.split(":")[1].strip() for line in err.splitlines()] == ["--set"]


def test_typed_set_overrides(model_dirs: dict[str, Path], capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "--model",
        str(model_dirs["qwen3-0.6b"]),
        "--gpu-count",
        "2",
        "--set",
        "lora_rank=16",
        "--set",
        "gradient_checkpointing=false",
        "--set",
        "zero_stage=3",
        "--json",
    )
    assert code == 0
    rec = json.loads(out)
    assert rec["job"]["hyperparameters"]["lora_rank"] == 16
    assert rec["resolved_parallelism"]["gradient_checkpointing"] is False
    assert rec["resolved_parallelism"]["zero_stage"] == 3
    assert "(requested: " in rec["plan_line"]


def test_bad_model_folder_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    code, _, err = run_cli(capsys, "--model", str(tmp_path))
    assert code == 2
    assert err.count("\n") == 1 and str(tmp_path / "model.safetensors") in err


def test_plan_job_equals_notebook_api(model_dirs: dict[str, Path]) -> None:
    model = str(model_dirs["mistral-7b"])
    a = plan(model=model, gpu="H100-80GB", gpu_count=2, lora_rank=8).to_dict()
    job = job_from_fields({"model": model, "gpu": "H100-80GB", "gpu_count": 2, "lora_rank": 8})
    assert plan_job(job).to_dict() == a
