"""Token counting for the cost: the trainer's own tokenization, the content-hash cache, and
a cache hit that never imports tokenizers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.plan.tokens import cache_dir, cached_count, count_tokens

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "assets" / "tiny-model"
DATA = ROOT / "assets" / "data"
BUNDLED = [
    ("sft.jsonl", "sft_text"),
    ("sft_messages.jsonl", "sft_text"),
    ("sft_prompt_completion.jsonl", "sft_text"),
    ("dpo.jsonl", "dpo"),
]


def _flat(count) -> list[tuple[int, ...]]:
    return sorted(tuple(e[:-1]) for e in count.lengths for _ in range(e[-1]))


@pytest.mark.parametrize("name, method", BUNDLED)
def test_counts_equal_the_trainers_tokenization(name: str, method: str) -> None:
    """Every row's length equals what veri_tui/trainer/data.py builds with transformers' tokenizer
    (untruncated): text and completions with EOS, chat templates turn by turn, dpo pairs."""
    pytest.importorskip("transformers")
    from veri_tui.trainer import data
    from veri_tui.trainer.model import load_tokenizer

    examples = data.load_dataset(DATA / name, method, load_tokenizer(TINY), 10**9)
    if method == "dpo":
        expected = sorted((len(c.input_ids), len(r.input_ids)) for c, r in examples)
    else:
        expected = sorted((len(e.input_ids),) for e in examples)
    count = count_tokens(DATA / name, TINY, method)
    assert count.rows == len(examples) and _flat(count) == expected


def test_second_count_comes_from_the_cache(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text((DATA / "sft.jsonl").read_text())
    first = count_tokens(data, TINY, "sft_text")
    assert not first.cached and len(list(cache_dir().glob("*.json"))) == 1
    again = count_tokens(data, TINY, "sft_text")
    assert again == first  # the in-process memo
    assert cached_count(data, TINY, "dpo") is None  # the method is part of the key
    # Same bytes at another path: the content hash finds the cached count.
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(data.read_bytes())
    hit = cached_count(copy, TINY, "sft_text")
    assert hit is not None and hit.cached and _flat(hit) == _flat(first)
    # Changed content: a new count, not the stale one.
    data.write_text('{"text": "one two three four five six seven"}\n')
    assert cached_count(data, TINY, "sft_text") is None
    assert count_tokens(data, TINY, "sft_text").rows == 1


def test_corrupt_cache_entry_is_counted_again(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text((DATA / "sft.jsonl").read_text())
    count_tokens(data, TINY, "sft_text")
    (entry,) = cache_dir().glob("*.json")
    entry.write_text("{not json")
    fresh = tmp_path / "fresh.jsonl"  # another path: the in-process memo does not hold it
    fresh.write_bytes(data.read_bytes())
    assert cached_count(fresh, TINY, "sft_text") is None
    assert count_tokens(fresh, TINY, "sft_text").rows == 64
    assert json.loads(entry.read_text())["rows"] == 64  # rewritten whole


def test_cache_hit_plans_without_importing_tokenizers(tmp_path: Path) -> None:
    """A fresh `veri-tui plan` of a counted dataset reads the cache: no tokenizers, no jinja2."""
    data = tmp_path / "m.jsonl"
    data.write_text((DATA / "sft_messages.jsonl").read_text())
    code = (
        "import contextlib, io, json, sys\n"
        "from veri_tui.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    assert main(['plan', '--dataset', {str(data)!r}, '--json']) == 0\n"
        "print(json.dumps([json.loads(out.getvalue())['cost'],\n"
        "                  [m for m in ('tokenizers', 'jinja2') if m in sys.modules]]))\n"
    )
    env = {**os.environ, "VERI_HOME": os.environ["VERI_HOME"]}

    def run() -> tuple[dict, list[str]]:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        return tuple(json.loads(proc.stdout.splitlines()[-1]))  # type: ignore[return-value]

    cold, cold_mods = run()
    warm, warm_mods = run()
    assert cold_mods == ["tokenizers", "jinja2"] and warm_mods == []
    assert warm == cold and warm["dataset_tokens"] > 0


def test_bad_rows_name_file_and_line(tmp_path: Path) -> None:
    cases = [
        ('{"text": ""}', "line 1: `text` is empty"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', "no assistant turn"),
        ('{"other": 1}', "needs `text`, `messages` or `prompt`+`completion`"),
        ("[1, 2]", "a row must be a JSON object"),
    ]
    for i, (row, problem) in enumerate(cases):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_text(row + "\n")
        with pytest.raises(DataError, match=problem.replace("+", r"\+").replace("[", r"\[")):
            count_tokens(path, TINY, "sft_text")
    with pytest.raises(DataError, match="line 1: no `chosen` column"):
        path = tmp_path / "dpo.jsonl"
        path.write_text('{"prompt": "p", "rejected": "r"}\n')
        count_tokens(path, TINY, "dpo")


def test_without_the_tokenizers_package_samples_are_full_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veri_tui.plan import plan

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` fails
    data = tmp_path / "d.jsonl"
    data.write_text((DATA / "sft.jsonl").read_text())
    cost = plan(dataset=str(data), max_seq_length=128).cost
    assert cost["known"] and cost["dataset_tokens"] is None and cost["sample_length"] == 128
    assert cost["note"] == (
        "full-length samples assumed: the tokenizers package is not installed "
        "(pip install tokenizers)"
    )
    assert cost["steps"] == 64  # the rows still count: 64 rows, gbs 1
