"""Datasets over SSH (issue 27): a bad row is refused by file and line before anything is
uploaded; a save_to_disk folder is uploaded as source 0 (data/0/<name>/) and trained on. A
`report_to` tracker the host's Python cannot import is refused by the host's preflight,
before any upload, not mid-run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from ssh_helpers import cli
from support.datafiles import ROWS, write_jsonl, write_saved

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_bad_row_is_refused_before_any_upload(ssh_env, tmp_path: Path) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [*ROWS[:3], {"prompt": "no completion"}])
    out = cli("launch", "--host", ssh_env.alias, "--dataset", str(bad), "--gpu-count", "1")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: dataset: {bad} line 4: no `completion` column (the row has `prompt`)"
    ]
    assert not (tmp_path / "remote-veri").exists()  # nothing was uploaded


def test_a_tracker_the_host_lacks_is_refused_before_any_upload(ssh_env, tmp_path: Path) -> None:
    # The test host runs this interpreter: a tracker missing here is missing there.
    name = next((n for n in ("wandb", "mlflow") if importlib.util.find_spec(n) is None), None)
    if name is None:
        pytest.skip("wandb and mlflow are both installed here")
    out = cli("launch", "--host", ssh_env.alias, "--gpu-count", "1", "--set", f"report_to={name}")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: report_to: {name} is not installed on {ssh_env.alias}; pip install "
        f"'veri-tui[{name}]' (or pip install {name}), or drop it from report_to"
    ]
    assert not (tmp_path / "remote-veri").exists()  # nothing was uploaded


def test_a_save_to_disk_folder_is_uploaded_and_trained_on(ssh_env, tmp_path: Path) -> None:
    saved = write_saved(tmp_path / "my-set", ROWS)
    job = ["--host", ssh_env.alias, "--dataset", str(saved), "--gpu-count", "1"]
    out = cli("launch", *job, "--set", "max_steps=1", "--set", "max_seq_length=32", "--wait",
              "--json", timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr
    final = json.loads(out.stdout)
    assert final["status"] == "succeeded", final
    remote = Path(final["spec"]["datasets"][0]["path"])
    assert remote.parent.name == "0" and remote.name == "my-set"
    assert sorted(p.name for p in remote.iterdir()) == sorted(p.name for p in saved.iterdir())
