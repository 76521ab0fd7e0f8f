"""A dataset with a bad row on the test Slurm cluster (issue 27): refused by file and line
before anything is made or submitted (support/slurm_cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_helpers import cli, home
from support.datafiles import ROWS, write_jsonl
from support.slurm_cluster import SlurmCluster

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
