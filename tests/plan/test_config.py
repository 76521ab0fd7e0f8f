"""veri.toml, --set overrides and form fields into a JobConfig; the bundled examples plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from veri_tui.errors import VeriError
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.config import parse_value
from veri_tui.plan.model_sources import bundled_tiny_model

EXAMPLES = Path(__file__).resolve().parents[2] / "assets" / "examples"


@pytest.mark.parametrize(
    ("text", "value"),
    [("16", 16), ("false", False), ("True", True), ("1e-4", 1e-4), ("bf16", "bf16"),
     ("auto", "auto"), ('"3"', "3"), ("none", None)],
)  # fmt: skip
def test_set_values_are_typed(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_toml_method_table_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text("{}\n")
    cfg = tmp_path / "veri.toml"
    cfg.write_text(
        'model = "./m"\ndataset = "data.jsonl"\ngpu_count = 2\n'
        '[method]\nname = "dpo"\nbatch_size = 2\nlora_rank = 4\n'
    )
    job = load_job_config(cfg)
    assert job.method == "dpo" and job.gpu_count == 2
    assert job.model == str((tmp_path / "m").resolve())
    assert job.dataset == str((tmp_path / "data.jsonl").resolve())
    assert job.hyperparameters.micro_batch_size == 2 and job.hyperparameters.lora_rank == 4


def test_precedence_set_over_options_over_file(tmp_path: Path) -> None:
    cfg = tmp_path / "veri.toml"
    cfg.write_text('gpu_count = 2\nmodel = "Qwen/Qwen3-0.6B"\n[method]\nlora_rank = 4\n')
    job = load_job_config(cfg, gpu_count=4, sets=["lora_rank=16", "batch_size=3"])
    assert job.gpu_count == 4 and job.model == "Qwen/Qwen3-0.6B"  # a Hub id stays as given
    assert job.hyperparameters.lora_rank == 16 and job.hyperparameters.micro_batch_size == 3


def test_set_gpu_count_as_knob() -> None:
    assert load_job_config(sets=["gpu_count=3"]).gpu_count == 3


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b'gpu_count = "two\n', "invalid TOML"),
        (b"gpu_count = 2\n\xff\xfe\n", "not UTF-8"),
    ],
)
def test_bad_toml_names_the_file(tmp_path: Path, content: bytes, needle: str) -> None:
    cfg = tmp_path / "veri.toml"
    cfg.write_bytes(content)
    with pytest.raises(VeriError) as exc:
        load_job_config(cfg)
    (err,) = exc.value.errors
    assert err.key == str(cfg) and needle in err.message


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(VeriError, match="cannot read"):
        load_job_config(tmp_path / "nope.toml")


def test_bad_set_pairs_and_unknown_keys_together() -> None:
    with pytest.raises(VeriError) as exc:
        load_job_config(sets=["lora_rank", "learning_rat=1e-4", "zero_stage=1"])
    keys = [e.key for e in exc.value.errors]
    # The parse errors, then the refusal of a key that parsed (all refusals together).
    assert keys == ["--set", "learning_rat", "zero_stage"]
    assert "'learning_rate'" in exc.value.errors[1].message


def test_unknown_key_in_toml(tmp_path: Path) -> None:
    cfg = tmp_path / "veri.toml"
    cfg.write_text("[method]\ngradient_checkpoint = false\n")
    with pytest.raises(VeriError, match="did you mean 'gradient_checkpointing'"):
        load_job_config(cfg)


def test_defaults_plan_the_bundled_tiny_model() -> None:
    job = load_job_config()
    assert job.model is None and job.method == "sft_text" and job.gpu_count == 1
    rec = plan_job(job)
    assert rec.model["path"] == str(bundled_tiny_model())
    assert rec.parameter_count > 0 and rec.fits


@pytest.mark.parametrize("name", ["sft-tiny.toml", "dpo-lora-tiny.toml"])
def test_bundled_examples_plan(name: str) -> None:
    rec = plan_job(load_job_config(EXAMPLES / name))
    assert rec.fits and rec.model["path"] == str(bundled_tiny_model())
    assert Path(rec.job["dataset"]).is_file()


def test_bundled_moe_example_plans() -> None:
    rec = plan_job(load_job_config(EXAMPLES / "sft-lora-tiny-moe.toml"))
    assert rec.fits and rec.model["path"] == str(bundled_tiny_model().parent / "tiny-moe")
    assert rec.header_lines[1].startswith("experts: 8 routed, 2 per token")
    assert rec.resolved_parallelism["zero_stage"] == 3 and rec.trainable_parameter_count == 7168


def test_hub_examples_plan_from_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_dirs: dict[str, Path]
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repos = (("Qwen/Qwen3-0.6B", "qwen3-0.6b"), ("meta-llama/Llama-3.1-70B", "llama-3.1-70b"))
    for repo, key in repos:
        repo_dir = tmp_path / ("models--" + repo.replace("/", "--"))
        (repo_dir / "snapshots").mkdir(parents=True)
        (repo_dir / "snapshots" / "r1").symlink_to(model_dirs[key])
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / "main").write_text("r1")
    qlora = plan_job(load_job_config(EXAMPLES / "qwen3-0.6b-qlora-l4.toml"))
    assert qlora.resolved_parallelism["activation_checkpointing"] == "selective"
    assert "gradient_checkpointing=selective" in qlora.plan_line
    est = qlora.resolved_parallelism["memory_estimate"]
    assert est["load_in_4bit"] and est["components"]["frozen_base"] < 2 * qlora.parameter_count
    small = plan_job(load_job_config(EXAMPLES / "qwen3-0.6b-l4x4.toml"))
    assert small.resolved_parallelism["zero_stage"] == 0
    assert small.resolved_parallelism["gradient_accumulation_steps"] == 4
    big = plan_job(load_job_config(EXAMPLES / "llama-70b-h100x8.toml"))
    assert big.resolved_parallelism["zero_stage"] == 3 and not big.fits
