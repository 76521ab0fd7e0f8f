"""A dataset with a bad row on the test Slurm cluster (issue 27), and rows or a model the run
would fail on (issue 35): refused by file and line before anything is made or submitted
(support/slurm_cluster.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from slurm_helpers import cli, home
from support.datafiles import ROWS, write_jsonl
from support.slurm_cluster import SlurmCluster

from veri_tui.bundled import bundled_model

__all__ = ["home"]  # the fixture, imported for the test below

pytestmark = pytest.mark.slow


def test_a_bad_row_is_refused_before_anything_is_submitted(
    slurm: SlurmCluster, home: Path, tmp_path: Path, capsys
) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [*ROWS[:2], {"prompt": "", "completion": "x"}])
    code, out, err = cli(capsys, "launch", "--slurm", "local", "--partition", "debug",
                         "--dataset", str(bad))  # fmt: skip
    assert (code, out) == (2, "")
    assert err == f"error: dataset: {bad} line 3: `prompt` is empty (fill it in or drop the row)\n"
    assert not home.exists() or not list(home.glob("**/jobs/*"))
    assert slurm.jobs() == []


def test_what_the_run_would_fail_on_is_refused_before_anything_is_submitted(
    slurm: SlurmCluster, home: Path, tmp_path: Path, capsys
) -> None:
    # Issue 35: rows the prompt fills, a batch larger than the rows, a model without a
    # tokenizer, each found with the model's tokenizer on the login node, each one line.
    long = "Summarise this: " + "lorem ipsum dolor sit amet " * 10  # 64 < its tokens < 2048
    rows = [{"prompt": long if i == 4 else f"{i} + {i}?", "completion": f" {2 * i}"}
            for i in range(20)]  # fmt: skip
    data = write_jsonl(tmp_path / "qa.jsonl", rows)
    bare = shutil.copytree(bundled_model(), tmp_path / "saved-alone")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (bare / name).unlink()
    where = ["launch", "--slurm", "local", "--partition", "debug", "--dataset", str(data)]
    cases = [
        (["--set", "max_seq_length=64"], "error: dataset: 1 of 20 rows has no tokens to train "
         f"on within max_seq_length=64 (the prompt fills it): {data} line 5; raise "
         "max_seq_length (--set max_seq_length=N), or shorten or drop those rows"),
        (["--set", "micro_batch_size=30"], "error: global_batch_size: 60 (micro_batch_size 30 x "
         "gradient_accumulation_steps 1 x 2 data-parallel ranks) is more than the dataset's 20 "
         "rows; lower micro_batch_size or gradient_accumulation_steps, or set global_batch_size "
         "to at most 20"),
        (["--model", str(bare)], f"error: model: {bare} has no tokenizer files (tokenizer.json, "),
    ]  # fmt: skip
    for extra, line in cases:
        code, out, err = cli(capsys, *where, *extra)
        assert (code, out) == (2, ""), err
        assert err.startswith(line) and err.count("\n") == 1, err
    assert not home.exists() or not list(home.glob("**/jobs/*"))
    assert slurm.jobs() == []  # nothing submitted
