"""Issue 35 on this machine: what would fail inside the run is refused by `plan` and by
`launch`'s preflight, one line each naming the file and the way out, before any folder is made.

The rows are encoded by the trainer's own rules (veri_tui/jobfolder/data/encode.py) with the
model's tokenizer loaded as the ranks load it (veri_tui/trainer/datacheck.py, a real
transformers in a child process). Over SSH: tests/ssh/test_ssh_data_preflight.py; on Slurm:
tests/slurm/test_slurm_datasets.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.datafiles import write_jsonl

from veri_tui.bundled import assets_dir
from veri_tui.cli import main
from veri_tui.launch import jobs
from veri_tui.plan import load_job_config

TINY = assets_dir() / "tiny-model"
LONG = "Summarise this: " + "lorem ipsum dolor sit amet " * 10  # 64 < its tokens < 2048


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, [ln for ln in captured.err.splitlines() if ln.startswith("error: ")]


@pytest.fixture
def qa(tmp_path: Path) -> Path:
    """50 prompt/completion rows; rows 7, 18 and 34 (1-based) have a prompt of ~300 tokens."""
    rows = [{"prompt": LONG if i in (6, 17, 33) else f"What is {i} plus {i}?",
             "completion": f" {2 * i}."} for i in range(50)]  # fmt: skip
    return write_jsonl(tmp_path / "qa.jsonl", rows)


def test_a_model_without_a_usable_tokenizer_is_refused(home, tmp_path, qa, capsys) -> None:
    bare = shutil.copytree(TINY, tmp_path / "saved-alone")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (bare / name).unlink()
    for cmd in ("plan", "launch"):
        code, errors = _run([cmd, "--model", str(bare), "--dataset", str(qa)], capsys)
        assert code == 2 and len(errors) == 1, errors
        assert errors[0].startswith(f"error: model: {bare} has no tokenizer files (tokenizer.json")
        assert errors[0].endswith(
            f"AutoTokenizer.from_pretrained(BASE_MODEL).save_pretrained('{bare}')"
        )
    # Tokenizer files that make an empty tokenizer: it gives no ids for any text.
    from tokenizers import Tokenizer, models

    empty = shutil.copytree(TINY, tmp_path / "empty-vocab")
    Tokenizer(models.BPE(vocab={"<|endoftext|>": 0}, merges=[])).save(str(empty / "tokenizer.json"))
    code, errors = _run(["launch", "--model", str(empty), "--dataset", str(qa)], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: model: the tokenizer in {empty} gives no token ids for ")
    assert not (home / "jobs").exists()


def test_rows_with_nothing_to_train_on_and_a_batch_too_big(home, qa, capsys) -> None:
    short = ["--dataset", str(qa), "--set", "max_seq_length=64"]
    for cmd in ("plan", "launch"):
        code, errors = _run([cmd, *short] + (["--wait"] if cmd == "launch" else []), capsys)
        assert code == 2, errors
        assert errors == [
            "error: dataset: 3 of 50 rows have no tokens to train on within max_seq_length=64 "
            f"(the prompt fills it): {qa} lines 7, 18, 34; raise max_seq_length "
            "(--set max_seq_length=N), or shorten or drop those rows"
        ]
    # The batch against the rows the trainer keeps: 50 less eval_fraction's 5 held out.
    big = ["--dataset", str(qa), "--set", "micro_batch_size=46", "--set", "eval_fraction=0.1"]
    for cmd in ("plan", "launch"):
        code, errors = _run([cmd, *big], capsys)
        assert code == 2 and errors == [
            "error: global_batch_size: 46 (micro_batch_size 46 x gradient_accumulation_steps 1 "
            "x 1 data-parallel rank) is more than the dataset's 45 rows; lower micro_batch_size or "
            "gradient_accumulation_steps, or set global_batch_size to at most 45"
        ], errors
    assert not (home / "jobs").exists()
    # The preflight the app shows: the same refusals as rows, with the tokenizer and rows found.
    job = load_job_config(None, dataset=str(qa), sets=["max_seq_length=256"])
    rows = {name: (ok, detail) for name, ok, detail in jobs.preflight(job, None)}
    assert rows["tokenizer"][0] and rows["tokenizer"][1].endswith(f" from {TINY}")
    assert rows["rows"] == (True, "50 rows, each with tokens to train on within 256 tokens")


def test_a_check_made_here_is_kept_by_what_it_read(
    home, qa: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veri_tui.launch import datacheck
    from veri_tui.launch.local_host import LocalHost
    from veri_tui.plan import plan_job

    monkeypatch.setenv("VERI_DATACHECK_CACHE", str(tmp_path / "kept"))
    job = load_job_config(None, dataset=str(qa), sets=["max_seq_length=64"])
    rec = plan_job(job)
    first = datacheck.check_data(LocalHost(), None, job, rec)
    assert [r.key for r in first[1]] == ["dataset"]
    assert len(list((tmp_path / "kept").glob("*.json"))) == 1
    # Another process (the memo emptied): the kept answer, the check not run again.
    datacheck._MEMO.clear()
    asked: list[object] = []
    monkeypatch.setattr(datacheck, "_ask", lambda *args: asked.append(args) or {})
    assert datacheck.check_data(LocalHost(), None, job, rec) == first and not asked
    # Rows changed: checked again (the stand-in check answers nothing).
    datacheck._MEMO.clear()
    qa.write_text(qa.read_text().replace("What is 1 plus", "What is one plus"))
    assert datacheck.check_data(LocalHost(), None, job, rec) == ([], []) and len(asked) == 1
