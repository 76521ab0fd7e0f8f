"""Datasets through one loader (issue 27): parquet and CSV files, a save_to_disk folder and a
Hub id served offline from a local HF cache, all made here; column mapping; a weighted
mixture; the planner's count from the same rows as the trainer's tokenization; a bad row
refused by `launch` before anything is created, by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.datafiles import (
    ALPACA,
    CONFIGS_README,
    ROWS,
    SHAREGPT,
    isolate_hf,
    parquet_bytes,
    write_csv,
    write_hub_dataset,
    write_jsonl,
    write_parquet,
    write_saved,
)

from veri_tui.cli import main
from veri_tui.jobfolder.data.dataload import eval_split, mixed_rows
from veri_tui.jobfolder.data.source import parse_source, sources_of
from veri_tui.plan import load_job_config
from veri_tui.plan.dataset_locations import job_sources
from veri_tui.plan.tokens import count_tokens

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-model"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hub cache under tmp_path (offline) holding org/tiny: configs en (train, test), fr."""
    cache = isolate_hf(monkeypatch, tmp_path)
    files = {
        "README.md": CONFIGS_README.encode(),
        "en/train-00000-of-00001.parquet": parquet_bytes(tmp_path, ROWS[:5]),
        "en/test-00000-of-00001.parquet": parquet_bytes(tmp_path, ROWS[5:7]),
        "fr/train-00000-of-00001.parquet": parquet_bytes(tmp_path, ROWS[7:]),
    }
    write_hub_dataset(cache, "org/tiny", files)
    return cache


def rows_of(value: object, key: str = "dataset") -> list[dict]:
    job = load_job_config(None, sets=[]).copy_with(update={key: value})
    return [row for _, row in mixed_rows(job_sources(job, key))]


def test_each_source_reads_the_rows_it_holds(tmp_path: Path, hub: Path) -> None:
    assert rows_of(str(write_parquet(tmp_path / "a.parquet", ROWS))) == ROWS
    # CSV: every column as text (Alpaca's "0" output stays a string), Alpaca mapped
    alpaca = rows_of(str(write_csv(tmp_path / "a.csv", ALPACA)))
    assert alpaca[0] == {"prompt": "Add 0 and 0.\n\n0, 0\n\n", "completion": "0"}
    assert alpaca[1] == {"prompt": "Add 1 and 1.\n\n", "completion": "2"}  # no input
    saved = rows_of(str(write_saved(tmp_path / "saved", SHAREGPT, split="train")))
    assert saved[3] == {"messages": [{"role": "user", "content": "Say 3."},
                                     {"role": "assistant", "content": "3."}]}  # fmt: skip
    assert rows_of(str(write_saved(tmp_path / "plain", ROWS))) == ROWS
    # The Hub id from the local cache, offline: config and split as load_dataset takes them
    assert rows_of("org/tiny,config=en") == ROWS[:5]
    assert rows_of({"path": "org/tiny", "config": "en", "split": "test"}) == ROWS[5:7]
    assert rows_of("org/tiny,config=fr") == ROWS[7:]
    [src] = job_sources(load_job_config(None, dataset="org/tiny,config=fr"))
    assert src.hub == "org/tiny" and Path(src.path).parent.parent.name == "datasets--org--tiny"
    json_array = tmp_path / "a.json"
    json_array.write_text(json.dumps(ROWS))
    assert rows_of(str(json_array)) == ROWS


def test_column_mapping_and_its_errors(tmp_path: Path, hub: Path) -> None:
    qa = [{"q": f"q{i}?", "a": f" a{i}", "id": i} for i in range(4)]
    path = write_parquet(tmp_path / "qa.parquet", qa)
    assert rows_of(f"{path},prompt=q,completion=a")[2] == {"prompt": "q2?", "completion": " a2"}
    table = {"path": str(path), "columns": {"prompt": "q", "completion": "answer"}}
    with pytest.raises(Exception, match=r"qa.parquet row 1: no column 'answer' \(the row has"):
        rows_of(table)
    with pytest.raises(Exception, match=r"row 1: no column 'ids' \(the row has: a, id, q\); did "
                       r"you mean 'id'\?"):  # fmt: skip
        rows_of(f"{path},prompt=ids,completion=a")
    with pytest.raises(ValueError, match="columns: 'question' is not a row key"):
        parse_source({"path": "x", "columns": {"question": "q"}})
    with pytest.raises(ValueError, match=r"\[1\]: weight: must be a number above 0"):
        sources_of(["a.jsonl", "b.jsonl,weight=0"])


def test_a_mixture_takes_each_source_weight_times(tmp_path: Path) -> None:
    a = write_parquet(tmp_path / "a.parquet", ROWS)  # 12 rows
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": f"b{i}"} for i in range(10)])
    rows = rows_of([f"{a},weight=0.5", {"path": str(b), "weight": 2}])
    from_a = [r for r in rows if "prompt" in r]
    assert len(from_a) == 6 and len({r["prompt"] for r in from_a}) == 6  # a seeded half
    assert len(rows) == 6 + 20 and sorted(r["text"] for r in rows[6:]).count("b3") == 2
    assert rows == rows_of([f"{a},weight=0.5", {"path": str(b), "weight": 2}])  # same choice
    held = eval_split(len(rows), 0.25, seed=42)
    assert len(held) == 6 and held == eval_split(len(rows), 0.25, seed=42)


def test_the_planner_counts_the_rows_the_trainer_tokenizes(
    home: Path, tmp_path: Path, hub: Path
) -> None:
    from transformers import AutoTokenizer

    from veri_tui.plan import tokens
    from veri_tui.trainer.data import encode_row

    tok = AutoTokenizer.from_pretrained(TINY)
    job = load_job_config(None, dataset=["org/tiny,config=en", str(tmp_path / "s")])
    write_saved(tmp_path / "s", SHAREGPT)
    sources = job_sources(job)
    count = count_tokens(sources, TINY, "sft_text")
    mine = sorted(len(encode_row(tok, r, w, "sft_text", 10**6).input_ids)
                  for w, r in mixed_rows(sources))  # fmt: skip
    assert count.rows == 13 and sorted(n for n, c in count.lengths for _ in range(c)) == mine
    tokens._MEMO.clear()
    assert count_tokens(sources, TINY, "sft_text").cached  # on disk, by the sources' bytes


def test_plan_prices_a_hub_dataset_and_eval_fraction_holds_rows_out(
    home: Path, hub: Path, capsys
) -> None:
    assert main(["plan", "--dataset", "org/tiny,config=en", "--json"]) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert cost["known"] and cost["dataset_rows"] == 5
    argv = ["plan", "--dataset", "org/tiny,config=en", "--set", "eval_fraction=0.4", "--json"]
    assert main(argv) == 0
    cost = json.loads(capsys.readouterr().out)["cost"]
    assert (cost["dataset_rows"], cost["eval_rows"]) == (3, 2)


def test_a_hub_id_not_cached_offline_is_one_line(hub: Path, capsys) -> None:
    assert main(["launch", "--dataset", "org/absent"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: dataset: org/absent is not in the local HF cache")
    assert "HF_HUB_OFFLINE is set; run `hf download --repo-type dataset org/absent`" in line


def test_launch_refuses_a_bad_row_by_file_and_line_before_anything(
    home: Path, tmp_path: Path, capsys
) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": f"row {i}"} for i in range(4)])
    with open(bad, "a") as fh:
        fh.write('{"txt": "typo"}\n')
    assert main(["launch", "--dataset", str(bad), "--gpu-count", "2"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: dataset: {bad} line 5: an sft_text row needs `text`, `messages` "
                   "or `prompt`+`completion`; the row has `txt`; `txt` looks like `text` "
                   "misspelt"]  # fmt: skip
    assert not (home / "jobs").exists()  # nothing created, nothing started
    from veri_tui.launch import jobs

    job = load_job_config(None, dataset=str(bad))
    failed = [r for r in jobs.preflight(job, None) if not r[1]]
    assert failed == [("dataset", False, err[0].removeprefix("error: dataset: "))]
    evals = load_job_config(None, sets=[f"eval_dataset={bad}"])
    [(key, _, detail)] = [r for r in jobs.preflight(evals, None) if not r[1]]
    assert key == "eval_dataset" and detail.startswith(f"{bad} line 5:")


def test_a_folder_that_is_no_dataset_is_one_line_without_walking_it_all(
    home: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A typo'd `/` or `~` (the app checks what is typed) must not be walked and hashed.
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("no rows here")
    assert main(["plan", "--dataset", str(tmp_path / "notes")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: dataset: {tmp_path / 'notes'}: a folder with no data file")
    monkeypatch.setattr("veri_tui.jobfolder.data.source.MAX_FOLDER_ENTRIES", 3)
    (tmp_path / "many").mkdir()
    for i in range(4):
        write_jsonl(tmp_path / "many" / f"{i}.jsonl", ROWS[:1])
    assert main(["launch", "--dataset", str(tmp_path / "many")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "not a dataset folder (over 3 files and folders)" in line
    assert not (home / "jobs").exists()


def test_the_eval_forward_is_in_the_planned_peak() -> None:
    from veri_tui.plan import plan
    from veri_tui.plan.losses import loss_chunk_bytes

    assert plan().to_dict()["activations"]["peak"]["eval_bytes"] is None  # no eval rows
    rec = plan(eval_fraction=0.1, micro_batch_size=2, max_seq_length=64).to_dict()
    act, peak = rec["activations"], rec["activations"]["peak"]
    tokens, vocab = act["tokens_per_micro_batch"], rec["model"]["vocab_size"]
    forward = 2 * vocab * tokens + loss_chunk_bytes(vocab, tokens)  # bf16 logits + one chunk
    assert act["eval_forward_bytes"] == forward
    assert peak["eval_bytes"] == peak["parts"]["states"] + act["in_flight_bytes"] + forward
    assert peak["allocated_bytes"] >= peak["eval_bytes"]  # the train step's peak is higher
    # An eval forward above the step's (a long eval logits tensor) is the peak itself.
    from veri_tui.plan.gpus import get_gpu
    from veri_tui.plan.memory import MemoryEstimate
    from veri_tui.plan.peak import peak_parts

    est = MemoryEstimate(**rec["resolved_parallelism"]["memory_estimate"])
    big = {**act, "eval_forward_bytes": 10 * peak["allocated_bytes"]}
    top = peak_parts(big, est, get_gpu(rec["gpu"]["name"]), evaluating=True)
    assert top["moment"] == "eval" and top["allocated_bytes"] == top["eval_bytes"]
    assert not peak_parts(big, est, get_gpu(rec["gpu"]["name"]))["eval_bytes"]


def _refusal(capsys, *argv: str) -> str:
    """The one error line of a refused `launch` (nothing created)."""
    assert main(["launch", *argv]) == 2
    [line] = capsys.readouterr().err.splitlines()
    return line


def test_a_row_without_the_keys_names_its_columns_and_the_mapping_that_reads_them(
    home: Path, tmp_path: Path, capsys
) -> None:
    qa = write_jsonl(tmp_path / "qa.jsonl", [{"question": f"q{i}?", "answer": f" a{i}"}
                                              for i in range(4)])  # fmt: skip
    fix = f"{qa},prompt=question,completion=answer"
    assert _refusal(capsys, "--dataset", str(qa)) == (
        f"error: dataset: {qa} line 1: an sft_text row needs `text`, `messages` or "
        f"`prompt`+`completion`; the row has `question`, `answer`; map the columns: "
        f"--dataset {fix}"
    )
    # Half a mapping: the rest found; the line pasted back reads every row.
    assert _refusal(capsys, "--dataset", f"{qa},prompt=question").endswith(
        "line 1: no `completion` column (the row has `question`, `answer`); map the columns: "
        f"--dataset {fix}"
    )
    assert rows_of(fix)[1] == {"prompt": "q1?", "completion": " a1"}
    # A DPO source under other names, and one with no likely names: the form to fill in.
    pairs = write_jsonl(tmp_path / "p.jsonl", [{"query": "q", "preferred": "y", "loser": "n"}])
    assert _refusal(capsys, "--method", "dpo", "--dataset", str(pairs)).endswith(
        f"map the columns: --dataset {pairs},prompt=query,chosen=preferred,rejected=loser"
    )
    odd = write_jsonl(tmp_path / "my data.jsonl", [{"a": "x", "b": "y"}])
    assert _refusal(capsys, "--dataset", str(odd)).endswith(
        f"the row has `a`, `b`; name the columns to read: --dataset '{odd},prompt=COLUMN,"
        "completion=COLUMN' (docs/datasets.md)"
    )
    assert not (home / "jobs").exists()


def test_a_missing_column_and_an_empty_cell_are_told_apart(
    home: Path, tmp_path: Path, capsys
) -> None:
    rows = [{"prompt": f"p{i}", "completoin": f"c{i}"} for i in range(3)]
    typo = write_csv(tmp_path / "typo.csv", rows)
    line = _refusal(capsys, "--dataset", str(typo))
    assert line == (
        f"error: dataset: {typo} row 1: no `completion` column (the row has `prompt`, "
        f"`completoin`; `completoin` looks like `completion` misspelt); map the columns: --dataset "
        f"{typo},prompt=prompt,completion=completoin"
    )
    assert rows_of(line.rsplit(" ", 1)[1])[2] == {"prompt": "p2", "completion": "c2"}
    empty = write_csv(tmp_path / "empty.csv", [{"prompt": "p", "completion": c}
                                               for c in ("a", "b", "", "d")])  # fmt: skip
    assert _refusal(capsys, "--dataset", str(empty)) == (
        f"error: dataset: {empty} row 3: `completion` is empty (fill it in or drop the row)"
    )
    # A later row that lacks a key: that row is wrong, not the names (no mapping offered).
    later = write_jsonl(tmp_path / "later.jsonl", [{"prompt": "p", "completion": "c"},
                                                   {"prompt": "p", "answer": "c"}])  # fmt: skip
    assert _refusal(capsys, "--dataset", str(later)) == (
        f"error: dataset: {later} line 2: no `completion` column (the row has `prompt`, `answer`)"
    )
    assert not (home / "jobs").exists()
