"""The token cache (veri_tui/trainer/tokencache.py, veri_tui/trainer/dataprep.py) without torchrun.

Round trips: every bundled dataset (text, messages, prompt + completion, dpo pairs), built in
one part or in three (as three ranks would), reads back exactly what `data.load_dataset`
makes. What invalidates a cache: a changed dataset, method, max_length or tokenizer file, a
flipped byte, a truncated file, an unreadable meta.json. `prepare_dataset` itself on a real
gloo group of one process: built, reused, rebuilt when the dataset changes or a file is
damaged, and a bad row leaves no cache. The 2-rank build and a resume's reuse run under
torchrun in tests/launch/test_resume.py and tests/trainer/test_trainer_failures.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch.distributed as dist
from trainer_jobs import DATASETS, TINY

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.rows import numbered_lines, read_rows
from veri_tui.trainer import data
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.dataprep import (
    NO_CACHE,
    build_part,
    cache_key,
    commit,
    prepare_dataset,
    stale_reason,
)
from veri_tui.trainer.model import load_tokenizer
from veri_tui.trainer.report import RankContext, RankLog
from veri_tui.trainer.tokencache import TokenCache, part_file

METHOD = {"text": "sft_text", "messages": "sft_text", "prompt_completion": "sft_text"}


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(TINY)


def _build(root: Path, dataset: Path, method: str, tok, parts: int, max_len: int = 64) -> Path:
    """A committed cache at root/tokens, built in `parts` parts (in turn, as ranks would)."""
    folder, final = root / "tokens.tmp", root / "tokens"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    built = [build_part(dataset, method, tok, max_len, folder, k, parts) for k in range(parts)]
    commit(folder, final, cache_key(dataset, method, max_len, TINY, tok), built)
    return final


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("parts", [1, 3])
def test_round_trip_equals_the_in_memory_dataset(tmp_path: Path, tok, name: str, parts: int):
    method = METHOD.get(name, "dpo")
    want = data.load_dataset(DATASETS[name], method, tok, 64)
    cache = TokenCache(_build(tmp_path, DATASETS[name], method, tok, parts))
    assert len(cache) == len(want) and [cache[i] for i in range(len(cache))] == want
    if method == "dpo":
        assert all(isinstance(row, tuple) and len(row) == 2 for row in cache)
    assert cache.meta["parts"] == parts and not cache.problems()
    with pytest.raises(IndexError):
        cache[len(want)]


def test_streamed_lines_number_rows_as_read_rows_does(tmp_path: Path) -> None:
    # JSON allows a raw U+2028 inside a string; str.splitlines (read_rows) splits there.
    text = '{"a": 1}\r\n\n  \n{"b": "x\u2028y"}\r{"c": 3}\x85{"d": 4}\n{"e": 5}'
    f = tmp_path / "d.jsonl"
    f.write_bytes(text.encode("utf-8"))
    with pytest.raises(DataError) as err:
        read_rows(f)
    streamed = list(numbered_lines(f))
    assert [no for no, _ in streamed] == [1, 4, 5, 6, 7, 8]
    assert err.value.message.startswith(f"{f} line 4: not valid JSON")
    f.write_bytes(text.replace("\u2028", " ").encode())
    assert [(no, json.loads(line)) for no, line in numbered_lines(f)] == read_rows(f)


def test_what_makes_a_cache_stale(tmp_path: Path, tok) -> None:
    dataset = tmp_path / "d.jsonl"
    shutil.copy(DATASETS["text"], dataset)
    final = _build(tmp_path, dataset, "sft_text", tok, 2)
    key = cache_key(dataset, "sft_text", 64, TINY, tok)
    assert stale_reason(final, key) is None
    assert stale_reason(tmp_path / "none", key) == NO_CACHE
    assert stale_reason(final, cache_key(dataset, "dpo", 64, TINY, tok)) == "the method changed"
    assert stale_reason(final, cache_key(dataset, "sft_text", 32, TINY, tok)) == (
        "max_length changed"
    )
    model = tmp_path / "model"
    shutil.copytree(TINY, model)
    (model / "tokenizer_config.json").write_text(
        (model / "tokenizer_config.json").read_text().replace("{", '{"x": 1, ', 1)
    )
    assert stale_reason(final, cache_key(dataset, "sft_text", 64, model, tok)) == (
        "the tokenizer changed"
    )
    dataset.write_text(dataset.read_text().replace("a", "b", 1))  # same size, other bytes
    assert stale_reason(final, cache_key(dataset, "sft_text", 64, TINY, tok)) == (
        "the dataset changed"
    )


def _damage(final: Path, how: str, part: int = 1) -> None:
    path = final / part_file(part, "ids")
    raw = bytearray(path.read_bytes())
    if how == "flip":
        raw[len(raw) // 2] ^= 0x01
    elif how == "truncate":
        del raw[-4:]
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("how", "said"),
    [("flip", "sha256 differs from the manifest"), ("truncate", "bytes where the layout needs")],
)
def test_a_damaged_file_is_never_trusted(tmp_path: Path, tok, how: str, said: str) -> None:
    final = _build(tmp_path, DATASETS["dpo"], "dpo", tok, 2)
    key = cache_key(DATASETS["dpo"], "dpo", 64, TINY, tok)
    _damage(final, how)
    reason = stale_reason(final, key)
    assert reason is not None and str(final / "part-1.ids") in reason and said in reason
    (final / "meta.json").write_text("{")
    assert "meta.json: unreadable" in stale_reason(final, key)


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _prepare(job: Path, dataset: Path, tok) -> tuple[TokenCache, list[str]]:
    cfg = TrainConfig(job, "sft_text", str(TINY), dataset=dataset, output_dir=job / "out")
    cfg.max_length = 64
    log = RankLog(RankContext(0, 0, 0, 1, job))
    try:
        cache = prepare_dataset(cfg, RankContext(0, 0, 0, 1, job), tok, TINY, log)
    finally:
        log.close()
    lines = (job / "log.txt").read_text().splitlines()
    (job / "log.txt").unlink()
    return cache, lines


def test_prepare_builds_reuses_and_rebuilds(tmp_path: Path, tok, group: None) -> None:
    dataset, job = tmp_path / "d.jsonl", tmp_path / "job"
    shutil.copy(DATASETS["text"], dataset)
    cache, log = _prepare(job, dataset, tok)
    [line] = log
    assert line.startswith(f"data: tokenized 64 rows into {job / 'tokens'} (") and len(cache) == 64
    assert line.endswith(" s, 1 rank)") and not (job / "tokens.tmp").exists()
    cache, log = _prepare(job, dataset, tok)
    [line] = log
    assert line.startswith(f"data: token cache reused ({job / 'tokens'}, 64 rows, checked in ")
    assert [cache[i] for i in range(64)] == data.load_dataset(dataset, "sft_text", tok, 64)
    dataset.write_text(dataset.read_text() + '{"text": "one row more"}\n')
    cache, log = _prepare(job, dataset, tok)
    assert log[0] == "data: token cache not reused: the dataset changed" and len(cache) == 65
    assert log[1].startswith("data: tokenized 65 rows")
    _damage(job / "tokens", "flip", part=0)
    cache, log = _prepare(job, dataset, tok)
    assert "sha256 differs" in log[0] and log[1].startswith("data: tokenized 65 rows")
    assert cache[64] == data.load_dataset(dataset, "sft_text", tok, 64)[64]


def test_a_bad_row_leaves_no_cache(tmp_path: Path, tok, group: None) -> None:
    dataset, job = tmp_path / "d.jsonl", tmp_path / "job"
    lines = DATASETS["text"].read_text().splitlines()
    dataset.write_text("\n".join([*lines[:6], '{"text": "unterminated', *lines[6:]]) + "\n")
    with pytest.raises(DataError) as err:
        _prepare(job, dataset, tok)
    assert err.value.message.startswith(f"{dataset} line 7: not valid JSON")
    assert err.value.line == 7
    assert not (job / "tokens").exists() and not (job / "tokens.tmp").exists()
    with pytest.raises(DataError, match="dataset file not found"):
        _prepare(job, tmp_path / "missing.jsonl", tok)
    # Other names than the trainer's: the columns found and the mapping, as the preflight says.
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "q?", "answer": "a"}\n')
    with pytest.raises(DataError) as err:
        _prepare(job, qa, tok)
    assert err.value.message.endswith(
        "the row has `question`, `answer`; map the columns: --dataset "
        f"{qa},prompt=question,completion=answer"
    )
    assert not (job / "tokens").exists() and not (job / "tokens.tmp").exists()
