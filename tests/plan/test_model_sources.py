"""Reading model info: hostile headers, sharded checkpoints, the HF cache, offline Hub ids."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from support.synthetic import QWEN3_0_6B, write_checkpoint, write_header_only

from veri_tui.errors import VeriError
from veri_tui.plan import read_model_info
from veri_tui.plan.headers import MAX_HEADER_BYTES

TINY = {
    "model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32,
}  # fmt: skip


def raw_file(path: Path, header: bytes, length: int | None = None, data: int = 0) -> Path:
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header)
    with path.open("r+b") as f:
        f.truncate(8 + len(header) + data)
    return path


def folder_with(tmp_path: Path, header: bytes, **kw) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    raw_file(tmp_path / "model.safetensors", header, **kw)
    return tmp_path


def error_of(folder: Path) -> tuple[str, str]:
    with pytest.raises(VeriError) as exc:
        read_model_info(str(folder))
    (err,) = exc.value.errors
    return err.key, err.message


GOOD = b'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}'


@pytest.mark.parametrize(
    ("header", "kw", "needle"),
    [
        (GOOD, {"length": MAX_HEADER_BYTES + 1}, "exceeds"),
        (GOOD, {"length": 10_000}, "past the end of the file"),
        (b"[1,2,3]", {}, "not a JSON object"),
        (b'{"w": nope}', {"data": 0}, "not UTF-8 JSON"),
        (b'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}', {"data": 8}, "past the end"),
        (b'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}', {"data": 12}, "shape needs"),
        (b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', {"data": 12}, "expected 0"),
        (b'{"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}', {"data": 2}, "unknown dtype"),
        (b'{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}', {}, "bad shape"),
        (b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}}', {"data": 4}, "data_offsets"),
    ],
)
def test_hostile_headers_name_the_file(tmp_path: Path, header: bytes, kw: dict, needle: str):
    kw.setdefault("data", 16)
    key, msg = error_of(folder_with(tmp_path, header, **kw))
    assert key == str(tmp_path / "model.safetensors")
    assert needle in msg


def test_truncated_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00")
    key, msg = error_of(tmp_path)
    assert key.endswith("model.safetensors") and "too short" in msg


def test_missing_shard_named_by_index(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, TINY, shards=3)
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    key, msg = error_of(tmp_path)
    assert key == str(tmp_path / "model-00002-of-00003.safetensors")
    assert "missing shard" in msg


def test_index_names_tensor_absent_from_shard(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, TINY, shards=2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.ghost.weight"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    key, msg = error_of(tmp_path)
    assert key.endswith("model-00001-of-00002.safetensors") and "model.ghost.weight" in msg


def test_missing_config_and_no_weights(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, TINY)
    (tmp_path / "config.json").unlink()
    assert error_of(tmp_path) == (str(tmp_path / "config.json"), "missing config.json")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").unlink()
    key, msg = error_of(tmp_path)
    assert key == str(tmp_path) and "no safetensors weights" in msg


def test_tied_head_in_header_counted_once(tmp_path: Path) -> None:
    config = {**TINY, "tie_word_embeddings": True}
    tensors = {
        "model.embed_tokens.weight": ("BF16", [32, 8]),
        "model.layers.0.mlp.up_proj.weight": ("BF16", [16, 8]),
        "lm_head.weight": ("BF16", [32, 8]),
    }
    write_checkpoint(tmp_path, config, tensors=tensors)
    info = read_model_info(str(tmp_path))
    assert info.parameter_count == 32 * 8 + 16 * 8
    assert info.tied_embeddings and "counted once" in (info.tied_note or "")


def test_header_reads_are_bounded(tmp_path: Path) -> None:
    # A 70B-sized shard (140 GB logical) is read in microseconds: only the header is touched.
    big = tmp_path / "m.safetensors"
    write_header_only(big, {"w": ("BF16", [8192, 8192 * 1000])})
    assert big.stat().st_size > 100e9
    assert big.stat().st_blocks * 512 < 1e6  # sparse: nothing written but the header


def _fake_cache(root: Path, repo: str, snapshot: str = "abc123") -> Path:
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / snapshot
    write_checkpoint(snap, QWEN3_0_6B)
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(snapshot)
    return snap


def test_hub_id_from_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # proves no network is asked
    snap = _fake_cache(tmp_path, "Qwen/Qwen3-0.6B")
    info = read_model_info("Qwen/Qwen3-0.6B")
    assert info.parameter_count == 596_049_920
    assert info.path == str(snap.resolve()) and info.source == "Qwen/Qwen3-0.6B"


def test_hub_cache_via_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _fake_cache(tmp_path / "hub", "org/model")
    assert read_model_info("org/model").parameter_count == 596_049_920


def test_hub_id_offline_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(VeriError) as exc:
        read_model_info("meta-llama/Llama-3.1-8B")
    (err,) = exc.value.errors
    assert err.key == "model"
    assert "HF_HUB_OFFLINE" in err.message and "not in the local HF cache" in err.message
    assert "\n" not in err.message


def test_not_a_folder_nor_hub_id() -> None:
    with pytest.raises(VeriError, match="no such folder, and not a Hub id"):
        read_model_info("./no/such/dir")
