"""Fast checks of the trainer's pieces without torchrun: spec, data, faults, records, files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from trainer_jobs import DATASETS, TINY

from veri_tui.jobfolder.contract.errors import ConfigError, DataError, ModelLoadError, TrainerError
from veri_tui.trainer import data
from veri_tui.trainer.checkpoint import _commit, committed_steps, verify
from veri_tui.trainer.config import from_spec, load_spec
from veri_tui.trainer.faults import FaultPlan, parse
from veri_tui.trainer.model import check_model_files, load_tokenizer, resolve_model_dir
from veri_tui.trainer.report import RankContext, classify, failure_record, write_failure
from veri_tui.trainer.schedule import lr_factor


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TINY)


def _spec(**over):
    spec = {"method": "sft_text", "model_path": str(TINY), "dataset": "d.jsonl"}
    spec.update(over)
    return spec


def test_spec_reads_job_json_or_bare_spec(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps({"spec": _spec(), "status": "pending"}))
    (tmp_path / "bare.json").write_text(json.dumps(_spec()))
    assert load_spec(tmp_path / "job.json") == load_spec(tmp_path / "bare.json")


def test_resolved_parallelism_wins_and_defaults_apply(tmp_path: Path) -> None:
    cfg = from_spec(
        _spec(
            hyperparameters={"batch_size": 3, "zero_stage": "auto", "lora_rank": 8},
            resolved_parallelism={"zero_stage": 3, "data_parallel_size": 2, "micro_batch_size": 2},
        ),
        tmp_path,
    )
    assert (cfg.zero_stage, cfg.micro_batch_size, cfg.global_batch_size) == (3, 2, 4)
    assert cfg.lora_alpha == 16.0 and cfg.output_dir == tmp_path / "output"


@pytest.mark.parametrize(
    ("over", "key"),
    [
        ({"method": "grpo"}, "method"),
        ({"hyperparameters": {"zero_stage": 1}}, "zero_stage"),
        ({"hyperparameters": {"precision": "fp16"}}, "precision"),
        ({"hyperparameters": {"tensor_parallel_size": 2}}, "tensor_parallel_size"),
        ({"hyperparameters": {"micro_batch_size": 2, "global_batch_size": 3}}, "global_batch_size"),
        ({"hyperparameters": {"max_steps": "many"}}, "max_steps"),
        ({"dataset": None}, "dataset"),
        ({"hyperparameters": {"cpu_offload": True}}, "cpu_offload"),
        ({"hyperparameters": {"artifact_shard_bytes": 0}}, "artifact_shard_bytes"),
    ],
)
def test_spec_refusals_name_the_key(tmp_path: Path, over: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_spec(_spec(**over), tmp_path)
    assert err.value.code == "CONFIG_ERROR" and err.value.message.startswith(f"{key}:")


def test_sft_formats_mask_what_is_not_trained(tok) -> None:
    rows = {n: data.read_rows(DATASETS[n])[0][1] for n in ("text", "messages", "prompt_completion")}
    text = data.encode_sft(tok, rows["text"], "x", 512)
    assert text.labels == text.input_ids and text.input_ids[-1] == tok.eos_token_id
    pc = data.encode_sft(tok, rows["prompt_completion"], "x", 512)
    n_prompt = len(tok(rows["prompt_completion"]["prompt"])["input_ids"])
    assert pc.labels[:n_prompt] == [data.IGNORE] * n_prompt
    assert (
        tok.decode(pc.labels[n_prompt:])
        == rows["prompt_completion"]["completion"] + "<|endoftext|>"
    )
    msg = data.encode_sft(tok, rows["messages"], "x", 512)
    trained = tok.decode([t for t in msg.labels if t != data.IGNORE])
    assert trained == rows["messages"]["messages"][-1]["content"] + "<|im_end|>\n"
    assert tok.decode(msg.input_ids).startswith("<|im_start|>system\n")


def test_truncation_and_rows_left_without_targets(tok) -> None:
    row = {"text": "Question: what is one plus one? " * 20}
    assert len(data.encode_sft(tok, row, "x", 16).input_ids) == 16
    with pytest.raises(DataError, match="no tokens left to train on within max_seq_length=4"):
        data.encode_sft(tok, {"prompt": "a long prompt " * 5, "completion": " b"}, "f line 3", 4)
    chosen, rejected = data.encode_dpo(
        tok, {"prompt": "P:", "chosen": " yes", "rejected": " no"}, "x", 64
    )
    assert chosen.input_ids[:2] == rejected.input_ids[:2]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", "line 2: a row must be a JSON object"),
        (
            '{"txt": "a"}',
            "line 2: an sft_text row needs `text`, `messages` or `prompt`+`completion`; the row "
            "has `txt`",
        ),
        ('{"text": ""}', "line 2: `text` is empty (fill it in or drop the row)"),
        ('{"text": 7}', "line 2: `text` must be a string, not int"),
        ('{"messages": [{"role": "bot", "content": "x"}]}', "line 2: messages[0] needs a role"),
        (
            '{"messages": [{"role": "user", "content": "x"}]}',
            "line 2: `messages` has no assistant turn",
        ),
        (
            '{"prompt": "a", "completoin": "b"}',
            "line 2: no `completion` column (the row has `prompt`, `completoin`)",
        ),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, tok, line: str, message: str) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError) as err:
        data.load_dataset(f, "sft_text", tok, 64)
    assert err.value.message.startswith(f"{f} {message}")


def test_dpo_rows_need_all_three_keys(tmp_path: Path, tok) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('\n{"prompt": "a", "chosen": "b"}\n')
    lacks = r"line 2: no `rejected` column \(the row has `prompt`, `chosen`\)"
    with pytest.raises(DataError, match=lacks):
        data.load_dataset(f, "dpo", tok, 64)
    with pytest.raises(DataError, match="dataset file not found"):
        data.read_rows(tmp_path / "missing.jsonl")


@given(
    n=st.integers(1, 4), mbs=st.integers(1, 3), ga=st.integers(1, 3), dp=st.integers(1, 4),
    step=st.integers(0, 50), seed=st.integers(0, 9),
)  # fmt: skip
def test_every_split_reads_each_row_of_the_global_batch_once(n, mbs, ga, dp, step, seed) -> None:
    gbs = mbs * ga * dp
    rows = n * gbs + 1  # one row left over: the partial batch is dropped
    batch = data.global_batch(rows, gbs, seed, step)
    parts = [data.rank_slice(batch, m, r, dp, mbs) for m in range(ga) for r in range(dp)]
    assert sorted(i for p in parts for i in p) == sorted(batch) and len(batch) == gbs
    assert batch == data.global_batch(rows, gbs, seed, step)  # every rank computes the same


def test_lr_warms_up_then_decays_to_zero() -> None:
    f = [lr_factor(s, 2, 10) for s in range(10)]
    assert f[:3] == [0.5, 1.0, 1.0]
    assert f[1:] == sorted(f[1:], reverse=True) and 0 < f[-1] < 0.05


def test_fault_spec_is_checked() -> None:
    assert [(f.what, f.rank, f.step) for f in parse("oom:1:2, kill:0:3")] == [
        ("oom", 1, 2),
        ("kill", 0, 3),
    ]
    with pytest.raises(ValueError, match="VERI_FAULT"):
        parse("boom:1:2")
    plan = FaultPlan(1, "oom:1:2,raise:1:3,ckpt_raise:1:4,raise:0:1")
    plan.at_step(1)  # rank 0's fault is not ours
    with pytest.raises(torch.OutOfMemoryError, match="^CUDA out of memory. Tried to allocate"):
        plan.at_step(2)
    with pytest.raises(RuntimeError, match="injected failure at step 3"):
        plan.at_step(3)
    plan.at_step(4)  # a checkpoint fault does not fire between steps
    with pytest.raises(BaseException, match="unexpected pos 512 vs 448") as err:
        plan.in_checkpoint(4)
    assert not isinstance(err.value, Exception)  # DCP's CheckpointException is a BaseException


def test_classification() -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    assert classify(DataError("x")) == ("DATA_ERROR", False)
    assert classify(torch.OutOfMemoryError("CUDA out of memory.")) == ("CUDA_OOM", False)
    gloo = RuntimeError("[../third_party/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    assert classify(gloo) == ("COMM_ERROR", True)
    assert classify(RuntimeError("CUDA error: uncorrectable ECC error encountered")) == (
        "HARDWARE_ERROR",
        False,
    )
    wrapped = CheckpointException(
        "save failed", {1: (torch.OutOfMemoryError("CUDA out of memory"), None)}
    )
    assert classify(wrapped) == ("CUDA_OOM", False)
    assert classify(ValueError("something else")) == ("UNKNOWN", False)


def test_failure_record_is_written_whole(tmp_path: Path) -> None:
    ctx = RankContext(rank=3, local_rank=1, node=1, world_size=4, job_dir=tmp_path)
    try:
        raise TrainerError("CONFIG_ERROR", "zero_stage: nope")
    except TrainerError as exc:
        write_failure(ctx, exc)
    rec = json.loads((tmp_path / "failures" / "rank-3.json").read_text())
    from torch.distributed.checkpoint.api import CheckpointException

    dcp = CheckpointException("load failed", {0: (RuntimeError("unexpected pos 8"), None)})
    assert failure_record(ctx, dcp)["message"] == (
        "CheckpointException: RuntimeError: unexpected pos 8"
    )
    assert (
        rec["code"] == "CONFIG_ERROR" and rec["node"] == 1 and rec["message"] == "zero_stage: nope"
    )
    assert [p.name for p in (tmp_path / "failures").iterdir()] == ["rank-3.json"]


def test_manifest_catches_a_zeroed_body(tmp_path: Path) -> None:
    tmp = tmp_path / "step-4.tmp"
    tmp.mkdir()
    (tmp / ".metadata").write_bytes(b"meta")
    (tmp / "__0_0.distcp").write_bytes(b"\x01" * 64)
    _commit(tmp, tmp_path / "step-4", {"step": 4})
    assert committed_steps(tmp_path) == [4] and verify(tmp_path / "step-4")
    (tmp_path / "step-4" / "__0_0.distcp").write_bytes(b"\x00" * 64)  # same size, zero-filled
    assert not verify(tmp_path / "step-4")


def test_model_files_are_checked(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        ModelLoadError, match="names model-00001-of-00002.safetensors, which is missing"
    ):
        check_model_files(tmp_path)
    with pytest.raises(ModelLoadError, match="directory not found"):
        resolve_model_dir(str(tmp_path / "nope"))


def test_trainer_imports_neither_textual_nor_paramiko() -> None:
    code = (
        "import sys, veri_tui.trainer.loop, veri_tui.trainer.__main__, veri_tui.trainer.checkpoint;"
        "bad = {'textual', 'paramiko'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
