"""Datasets made in tests: parquet and CSV files, a `save_to_disk` folder, and a Hub dataset
in a local HF cache laid out as huggingface_hub writes one (blobs, refs/main, snapshot
symlinks), so nothing is ever downloaded."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

ROWS = [{"prompt": f"Question {i}: what is {i} plus {i}?", "completion": f" {2 * i}."}
        for i in range(12)]  # fmt: skip
ALPACA = [{"instruction": f"Add {i} and {i}.", "input": "" if i % 2 else f"{i}, {i}",
           "output": f"{2 * i}"} for i in range(10)]  # fmt: skip
SHAREGPT = [{"conversations": [{"from": "human", "value": f"Say {i}."},
                               {"from": "gpt", "value": f"{i}."}]} for i in range(8)]  # fmt: skip


def isolate_hf(monkeypatch: Any, root: Path) -> Path:
    """HF_HOME, the hub and datasets caches under `root`, offline; the hub cache folder."""
    monkeypatch.setenv("HF_HOME", str(root / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hf" / "hub"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(root / "hf" / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return root / "hf" / "hub"


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """One JSON object per line."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A parquet file of `rows` (pyarrow, as `datasets` brings it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A CSV file with a header line (the standard library's writer)."""
    import csv

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_saved(path: Path, rows: list[dict[str, Any]], split: str | None = None) -> Path:
    """A `Dataset.save_to_disk` folder (a DatasetDict's when `split` is given)."""
    import datasets

    table = datasets.Dataset.from_list(rows)
    (datasets.DatasetDict({split: table}) if split else table).save_to_disk(str(path))
    return path


def _blob(cache_repo: Path, data: bytes) -> Path:
    blob = cache_repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    return blob


def write_hub_dataset(hub_cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """`repo_id` as huggingface_hub caches a dataset repo: datasets--org--name/ with blobs/,
    refs/main and snapshots/<commit>/ whose files are relative symlinks to the blobs."""
    repo = hub_cache / ("datasets--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
    snap = repo / "snapshots" / commit
    for name, data in files.items():
        blob, link = _blob(repo, data), snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def parquet_bytes(tmp: Path, rows: list[dict[str, Any]]) -> bytes:
    """The bytes of a parquet file of `rows` (for a Hub snapshot's blob)."""
    return write_parquet(tmp / f"rows-{len(rows)}-{id(rows)}.parquet", rows).read_bytes()


CONFIGS_README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train-*
  - split: test
    path: en/test-*
- config_name: fr
  data_files:
  - split: train
    path: fr/train-*
---
# a test dataset
"""
