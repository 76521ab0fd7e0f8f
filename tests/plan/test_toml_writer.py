"""`job_to_toml`: what it writes, `load_job_config` reads back to the same JobConfig."""

from __future__ import annotations

import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veri_tui.jobfolder.knobs.fields import TRACKERS
from veri_tui.plan import Hyperparameters, JobConfig, job_from_fields, job_to_toml, load_job_config


def read_back(text: str) -> JobConfig:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "veri.toml"
        path.write_text(text, encoding="utf-8")
        return load_job_config(path)


def assert_round_trip(job: JobConfig) -> None:
    back = read_back(job_to_toml(job))
    assert back == job
    assert back.hyperparameters_set() == job.hyperparameters_set()  # nothing pinned in passing


def test_layout_and_round_trip() -> None:
    job = job_from_fields(
        {
            "method": "dpo",
            "model": "/models/qwen 0.6b",
            "gpu": "custom-48GB",
            "gpu_count": 2,
            "dataset": "/data/pairs.jsonl",
            "lora_rank": 16,
            "batch_size": 2,
            "zero_stage": "3",
            "learning_rate": 5e-6,
            "gradient_checkpointing": False,
        }
    )
    text = job_to_toml(job)
    data = tomllib.loads(text)
    assert data["method"]["name"] == "dpo"  # inside [method]: no clash with the table
    assert data["model"] == "/models/qwen 0.6b" and "output" not in data
    assert data["method"]["micro_batch_size"] == 2 and data["method"]["zero_stage"] == 3
    assert "precision" not in data["method"]  # unset knobs stay unset (defaults, "auto")
    assert_round_trip(job)


def test_strings_that_need_escapes() -> None:
    odd = 'q"uote \\ back\nline\ttab \x7f del \x01 ü'
    job = JobConfig(method=odd, model="/m/" + odd, gpu=odd, output="/o/" + odd)
    assert_round_trip(job)


def test_nan_is_refused_not_written() -> None:
    job = JobConfig()
    job.hyperparameters.learning_rate = float("nan")  # pydantic refuses it; force it here
    job.hyperparameters.fields_given.add("learning_rate")
    with pytest.raises(ValueError, match="NaN"):
        job_to_toml(job)


# One strategy per knob: a new knob fails `test_every_knob_has_a_strategy` until it has one.
I64 = st.integers(-(2**63), 2**63 - 1)
POS = st.integers(1, 2**63 - 1)
TEXT = st.text(min_size=1)  # an empty value means "not set" to the reader
POS_FLOAT = st.floats(min_value=0, exclude_min=True, allow_nan=False)
NONNEG_FLOAT = st.floats(min_value=0, allow_nan=False)
KNOBS: dict[str, st.SearchStrategy[Any]] = {
    "data_parallel_size": I64,
    "zero_stage": st.just("auto") | I64,
    "micro_batch_size": POS,
    "gradient_accumulation_steps": POS,
    "global_batch_size": POS,
    "precision": TEXT,
    "gradient_checkpointing": st.booleans(),
    "activation_checkpointing": st.sampled_from(["none", "selective", "full"]),
    "cpu_offload": st.booleans(),
    "lora_rank": st.integers(0, 2**63 - 1),
    "lora_alpha": POS_FLOAT,
    "lora_target_modules": st.lists(TEXT, min_size=1, max_size=4),
    "lora_dropout": st.floats(min_value=0, max_value=1, exclude_max=True),
    "packing": st.booleans(),
    "tensor_parallel_size": I64,
    "context_parallel_size": I64,
    "pipeline_parallel_size": I64,
    "expert_parallel_size": I64,
    "use_unsloth": st.booleans(),
    "load_in_4bit": st.booleans(),
    "use_liger": st.booleans(),
    "price_per_gpu_hour": st.floats(min_value=0, exclude_min=True, allow_infinity=False),  # finite
    "learning_rate": POS_FLOAT,
    "num_epochs": POS,
    "max_steps": POS,
    "warmup_steps": st.integers(0, 2**63 - 1),
    "lr_scheduler": st.sampled_from(["cosine", "linear", "constant"]),
    "weight_decay": NONNEG_FLOAT,
    "max_grad_norm": NONNEG_FLOAT,
    "adam_beta1": st.floats(min_value=0, max_value=1, exclude_max=True),
    "adam_beta2": st.floats(min_value=0, max_value=1, exclude_max=True),
    "seed": I64,
    "beta": POS_FLOAT,
    "max_seq_length": st.integers(8, 2**63 - 1),
    "max_length": st.integers(8, 2**63 - 1),
    "checkpoint_steps": POS,
    "keep_checkpoints": POS,
    "resume": st.booleans(),
    "logging_steps": POS,
    "artifact_shard_bytes": POS,
    "network": st.sampled_from(["ethernet", "infiniband"]),
    "internode_bandwidth_gbps": st.floats(1e-3, 1e6),
    "network_measured": st.text(max_size=40),
    "hang_timeout_s": POS_FLOAT,
    "load_timeout_s": POS_FLOAT,
    "max_restarts": st.integers(0, 2**63 - 1),
    "eval_fraction": st.floats(min_value=0, max_value=0.9),
    "eval_steps": POS,
    "report_to": st.one_of(
        st.sampled_from(TRACKERS), st.lists(st.sampled_from(TRACKERS), min_size=1, max_size=4)
    ),
}
# Paths the reader keeps as written (absolute), or Hub ids (not a folder beside the file);
# no NUL (no path holds one) and no lone surrogates (a UTF-8 file cannot).
PATH_CHAR = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
PATH = st.none() | st.text(PATH_CHAR, min_size=1).map(lambda s: "/" + s)
MODEL = PATH | st.from_regex(r"\A[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+\Z")


def test_every_knob_has_a_strategy() -> None:
    assert set(KNOBS) == set(Hyperparameters.knob_table)


@settings(max_examples=150, deadline=None)
@given(
    knobs=st.fixed_dictionaries({}, optional=KNOBS),
    method=TEXT,
    model=MODEL,
    gpu=TEXT,
    gpu_count=I64,
    dataset=PATH,
    output=PATH,
)
def test_round_trip_over_the_knobs(
    knobs: dict[str, Any],
    method: str,
    model: str | None,
    gpu: str,
    gpu_count: int,
    dataset: str | None,
    output: str | None,
) -> None:
    fields = {"method": method, "model": model, "gpu": gpu, "gpu_count": gpu_count}
    job = job_from_fields({**fields, "dataset": dataset, "output": output, **knobs})
    assert_round_trip(job)
