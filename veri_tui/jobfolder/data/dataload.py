"""The rows of a job's datasets, in the order the trainer numbers them, from any source.

JSON Lines and JSON (an array of objects, or JSON Lines under a .json name) are read by the standard
library (veri_tui/jobfolder/data/rows.py): a bad row is named by its file and line, and the bundled
datasets never import `datasets` (about 1.4 s). Parquet, CSV, a `save_to_disk` folder and a folder
of data files (a Hub dataset's cached snapshot is one; its README's configs and the file names'
splits are read as on the Hub) go through Hugging Face `datasets`, imported only then; their rows
are named `row N` (1-based). Every row goes through the column mapping
(veri_tui/jobfolder/data/columns.py) before anyone checks or tokenizes it; a row still without the
keys its method reads is refused with the mapping that would read it
(veri_tui/jobfolder/data/colhint.py).

A mixture is its sources one after another, each row of a source taken `weight` times: the
whole part of the weight as repeats, the fractional part as a seeded choice of rows (the
same on every machine). The trainer shuffles the mixed rows per epoch (veri_tui/trainer/data.py).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.colhint import check_keys
from veri_tui.jobfolder.data.columns import map_row
from veri_tui.jobfolder.data.rows import numbered_lines, parse_row
from veri_tui.jobfolder.data.source import Source

TABULAR = {".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
_LOADED: dict[Source, Any] = {}  # this process's open `datasets` tables, by source


def kind_of(path: Path) -> str:
    """jsonl | json | parquet | csv | saved (a save_to_disk folder) | folder (data files)."""
    if path.is_dir():
        saved = (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()
        return "saved" if saved else "folder"
    suffix = path.suffix.lower()
    if suffix == ".json":
        with open(path, "rb") as fh:
            head = fh.read(4096).lstrip()
        return "json" if head.startswith(b"[") else "jsonl"
    return TABULAR.get(suffix, "jsonl")  # any other name is read as JSON Lines, as before


def _import_datasets(src: Source) -> Any:
    try:
        import datasets  # type: ignore[import-untyped]  # (no py.typed in 5.x)
    except ImportError:
        raise DataError(
            f"{src.label}: reading it needs the `datasets` package (pip install datasets)"
        ) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _header(path: Path, sep: str) -> list[str]:
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh, delimiter=sep), [])


def hf_table(src: Source) -> Any:
    """The source as a `datasets.Dataset` (one split), opened once per process."""
    if src in _LOADED:
        return _LOADED[src]
    path = Path(src.path)
    if not path.exists():
        raise DataError(f"{src.label}: dataset file not found")
    datasets = _import_datasets(src)
    fmt = kind_of(path)
    split = src.split or "train"
    try:
        if fmt == "saved":
            table = datasets.load_from_disk(str(path))
            if isinstance(table, datasets.DatasetDict):
                if split not in table:
                    raise DataError(f"{src.label}: no split {split!r} (it has {', '.join(table)})")
                table = table[split]
        elif fmt == "folder":
            table = datasets.load_dataset(str(path), name=src.config, split=split)
        elif fmt == "csv":  # every column as text: "12" stays a string, "" stays empty
            sep = "\t" if path.suffix.lower() == ".tsv" else ","
            text = datasets.Features({n: datasets.Value("string") for n in _header(path, sep)})
            table = datasets.load_dataset("csv", data_files=str(path), split=split, sep=sep,
                                          features=text, keep_default_na=False)  # fmt: skip
        else:
            table = datasets.load_dataset(fmt, data_files=str(path), split=split)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - datasets raises many types; one line names it
        raise DataError(f"{src.label}: cannot read the dataset ({_one_line(exc)})") from None
    _LOADED[src] = table
    return table


Loads = Callable[[str], Any]


def _raw_rows(src: Source, loads: Loads = json.loads) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row as stored) of every row of one source; `loads` parses a JSON line (the
    planner passes pydantic_core's from_json, ~4x faster)."""
    path = Path(src.path)
    if not path.exists():
        raise DataError(f"{src.label}: dataset file not found")
    fmt = kind_of(path)
    if fmt == "jsonl":
        for no, line in numbered_lines(path):
            where = f"{path} line {no}"
            yield where, parse_row(line, where, loads)
        return
    if fmt == "json":
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{path}: not a valid JSON array ({exc})") from None
        if not isinstance(items, list):
            raise DataError(f"{path}: a .json dataset is an array of objects, or JSON Lines")
        for i, row in enumerate(items, start=1):
            if not isinstance(row, dict):
                raise DataError(f"{path} item {i}: a row must be a JSON object")
            yield f"{path} item {i}", row
        return
    table, no = hf_table(src), 0
    for batch in table.iter(batch_size=1024):
        names = list(batch)
        for values in zip(*(batch[n] for n in names), strict=True):
            no += 1
            yield f"{src.label} row {no}", dict(zip(names, values, strict=True))


def source_rows(src: Source, loads: Loads = json.loads, method: str | None = None
                ) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """(where, row) of one source, mapped to the trainer's keys; with `method`, a row
    without the keys it reads is refused with the columns found (and, on the first row, the
    mapping that would read them: veri_tui/jobfolder/data/colhint.py)."""
    for no, (where, raw) in enumerate(_raw_rows(src, loads)):
        row = map_row(raw, src.columns, where)
        if method is not None:
            check_keys(raw, row, src, method, where, first=no == 0)
        yield where, row


def count_source(src: Source) -> int:
    """The rows one source holds (before its weight), without checking them."""
    path = Path(src.path)
    if not path.exists():
        raise DataError(f"{src.label}: dataset file not found")
    if kind_of(path) == "jsonl":
        return sum(1 for _ in numbered_lines(path))
    if kind_of(path) == "json":
        return sum(1 for _ in _raw_rows(src))
    return len(hf_table(src))


def repeats(n: int, weight: float, index: int) -> list[int]:
    """How many times each of a source's n rows is taken: int(weight), plus one for a
    seeded round(fraction x n) of them (seeded by the source's place in the mixture)."""
    whole, frac = int(weight), weight - int(weight)
    out = [whole] * n
    extra = round(frac * n)
    if extra:
        for i in random.Random(f"veri-mix-{index}-{n}").sample(range(n), extra):
            out[i] += 1
    return out


def mixed_count(sources: list[Source]) -> int:
    """The mixture's rows (weights applied), without checking them."""
    total = 0
    for index, src in enumerate(sources):
        n = count_source(src)
        total += n if src.weight == 1.0 else sum(repeats(n, src.weight, index))
    return total


def mixed_rows(sources: list[Source], loads: Loads = json.loads, method: str | None = None
               ) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """(where, row) of the mixture, in the order the trainer numbers its rows; `method`: the
    keys each row needs checked (`source_rows`)."""
    for index, src in enumerate(sources):
        if src.weight == 1.0:
            yield from source_rows(src, loads, method)
            continue
        times = repeats(count_source(src), src.weight, index)
        for k, (where, row) in enumerate(source_rows(src, loads, method)):
            for _ in range(times[k] if k < len(times) else 0):
                yield where, row


def eval_split(total: int, fraction: float, seed: int) -> list[int]:
    """The mixed rows held out for evaluation (sorted): a seeded round(fraction x total),
    at least one, leaving at least one to train on; [] for fraction 0."""
    if not fraction or total < 2:
        return []
    k = min(max(1, round(fraction * total)), total - 1)
    return sorted(random.Random(f"veri-eval-{seed}-{total}").sample(range(total), k))
