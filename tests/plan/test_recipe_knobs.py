"""The recipe knobs as the planner counts and refuses them: `lora_target_modules` narrows
the adapter to those linears (the count read here from the bundled tiny model's safetensors
header by hand), an unknown module is one refusal naming the model's, `lora_dropout` is in
[0, 1), `lr_scheduler` one of its values; `packing` (sft_text only) plans the packed rows
the trainer makes (steps, padded length)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.errors import VeriError
from veri_tui.plan import plan
from veri_tui.plan.cost import cost_line
from veri_tui.plan.model_sources import bundled_tiny_model


def _header_in_out(modules: set[str]) -> tuple[int, int]:
    """(sum of in + out features, linears) over the 2-D `<module>.weight` tensors named."""
    raw = (bundled_tiny_model() / "model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    in_out = count = 0
    for name, meta in header.items():
        parts = name.split(".")
        if parts[-1] == "weight" and parts[-2] in modules and len(meta["shape"]) == 2:
            in_out += sum(meta["shape"])
            count += 1
    return in_out, count


@pytest.mark.parametrize("modules", [["q_proj", "v_proj"], ["down_proj"], ["o_proj", "up_proj"]])
def test_the_adapter_counts_only_the_chosen_modules(modules: list[str]) -> None:
    in_out, count = _header_in_out(set(modules))
    assert count >= 2  # one per layer of the tiny model
    rec = plan(lora_rank=8, lora_target_modules=modules)
    assert rec.model["lora_in_out_sum"] == in_out
    assert rec.model["lora_target_count"] == count
    assert rec.model["lora_target_modules"] == sorted(modules)
    assert rec.trainable_parameter_count == 8 * in_out
    assert f"on {count} linears" in rec.header_lines[0]


def test_the_states_follow_the_targets() -> None:
    every = plan(lora_rank=8)
    some = plan(lora_rank=8, lora_target_modules=["q_proj"])
    # Default: every projection the header has (the trainer's all-linear rule).
    all_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert every.trainable_parameter_count == 8 * _header_in_out(all_modules)[0]
    assert some.trainable_parameter_count == 8 * _header_in_out({"q_proj"})[0]
    assert some.states_bytes_per_gpu < every.states_bytes_per_gpu


def test_an_unknown_module_is_refused_naming_the_models() -> None:
    with pytest.raises(VeriError) as exc:
        plan(lora_rank=8, lora_target_modules=["q_proj", "qkv"])
    (refusal,) = exc.value.errors
    assert refusal.key == "lora_target_modules"
    assert "'qkv'" in refusal.message and "q_proj, k_proj, v_proj, o_proj" in refusal.message


def test_the_cli_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--set", "lora_rank=8", "--set", 'lora_target_modules=["q_proj","x"]'])
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert code != 0
    assert lines == [
        "error: lora_target_modules: 'x' is not a module LoRA can adapt in this model; it has "
        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"
    ]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("lora_dropout", 1.0, "must be below 1 (got 1.0)"),
        ("lora_dropout", -0.1, "must be at least 0 (got -0.1)"),
        ("lr_scheduler", "step", "must be one of 'cosine', 'linear' or 'constant' (got 'step')"),
        ("lora_target_modules", "q_proj", "must be a list (got 'q_proj')"),
    ],
)
def test_bad_values_are_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(VeriError) as exc:
        plan(lora_rank=8, **{key: value})
    assert [e.key for e in exc.value.errors] == [key]
    assert message in exc.value.errors[0].message


def test_good_values_plan() -> None:
    rec = plan(lora_rank=8, lora_dropout=0.1, lr_scheduler="linear")
    assert rec.job["hyperparameters"]["lora_dropout"] == 0.1
    assert rec.job["hyperparameters"]["lr_scheduler"] == "linear"


def test_packing_is_refused_for_dpo_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--method", "dpo", "--set", "packing=true"])
    out = capsys.readouterr()
    assert code != 0
    assert (out.out + out.err).strip().splitlines() == [
        "error: packing: packing applies to sft_text, not dpo (a dpo pair is one forward of "
        "its own); drop packing"
    ]


def test_packing_plans_the_trainers_packed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    from veri_tui.jobfolder.data.packing import pack
    from veri_tui.trainer.data import load_dataset

    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    model = bundled_tiny_model()
    data = model.parent / "data" / "sft.jsonl"
    tok = AutoTokenizer.from_pretrained(model)
    lengths = [len(e.input_ids) for e in load_dataset(data, "sft_text", tok, 96)]
    rows = len(pack(lengths, 96))
    knobs = {"gpu_count": 2, "micro_batch_size": 1, "max_seq_length": 96}
    packed = plan(dataset=str(data), packing=True, **knobs).cost
    plain = plan(dataset=str(data), **knobs).cost
    assert (packed["dataset_rows"], packed["packed_from"], plain["dataset_rows"]) == (rows, 64, 64)
    assert packed["steps"] == rows // 2 < plain["steps"] == 32
    assert packed["dataset_tokens"] == plain["dataset_tokens"]  # the same tokens, fewer rows
    assert packed["sample_length"] > plain["sample_length"]  # each row is fuller
    assert f"packing: 64 samples in {rows} rows, {rows // 2} steps" in cost_line(packed)
