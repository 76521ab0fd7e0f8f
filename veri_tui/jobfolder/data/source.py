"""A job's datasets as sources: what each names, how it is written, what its files are.

A source is a path or a Hub id with options: `config` and `split` (as `datasets.
load_dataset` takes them), `weight` (the mixture's multiplier of its rows: 2 = every row
twice, 0.5 = a seeded half) and a column mapping (`prompt = "question"`: the row key the
trainer reads, from the source's column). One source is written as a string,
`PATH[,config=C][,split=S][,weight=W][,<key>=<column>...]`, or as a table with those keys
(`columns` for the mapping); a mixture is a list of them. The launch side resolves every
path to this machine's (a Hub id to its snapshot in the local HF cache) before job.json
is written, so the trainer only ever reads local files (veri_tui/jobfolder/data/dataload.py).

Standard library only: the planning core, the launch side and the trainer parse sources by
these rules, and refuse a bad one with the same message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError

#: The row keys the trainer reads (veri_tui/trainer/data.py); a mapping renames a column to one.
ROW_KEYS = ("text", "prompt", "completion", "messages", "chosen", "rejected")
OPTIONS = ("config", "split", "weight")
#: Marks a resolved Hub id in job.json: `hub` holds the id, `path` its local snapshot.
HUB = "hub"


@dataclass(frozen=True)
class Source:
    """One dataset of a job (see the module docstring for the keys)."""

    path: str
    config: str | None = None
    split: str | None = None
    weight: float = 1.0
    columns: tuple[tuple[str, str], ...] = ()  # (row key, source column), sorted
    hub: str | None = None  # the Hub id a resolved `path` (a cached snapshot) came from

    @property
    def label(self) -> str:
        """How messages name it: `org/name (config en, split train)`, a path as given."""
        extra = [f"{k} {v}" for k, v in (("config", self.config), ("split", self.split)) if v]
        name = self.hub or self.path
        return f"{name} ({', '.join(extra)})" if extra else name

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (job.json `spec.datasets`): `path` and the keys set."""
        out: dict[str, Any] = {"path": self.path}
        out.update({k: v for k in ("config", "split", HUB) if (v := getattr(self, k))})
        if self.weight != 1.0:
            out["weight"] = self.weight
        if self.columns:
            out["columns"] = dict(self.columns)
        return out

    def as_text(self) -> str:
        """The string form `parse_source` reads back (what --dataset takes):
        `PATH[,config=C][,split=S][,weight=W][,<key>=<column>...]`, a Hub id as its id."""
        parts = [self.hub or self.path]
        parts += [f"{k}={v}" for k in ("config", "split") if (v := getattr(self, k))]
        if self.weight != 1.0:
            parts.append(f"weight={self.weight:g}")
        return ",".join(parts + [f"{key}={column}" for key, column in self.columns])

    def moved(self, path: str | os.PathLike[str], hub: str | None = None) -> Source:
        """The same source read from another path (resolved, or uploaded to a host)."""
        return replace(self, path=str(path), hub=hub or self.hub)


def _weight(value: Any) -> float:
    try:
        weight = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"weight: expected a number, got {value!r}") from None
    if not weight > 0 or weight == float("inf"):
        raise ValueError(f"weight: must be a number above 0, got {value!r}")
    return weight


def _columns(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise ValueError(f"columns: expected a table of row key = column, got {value!r}")
    for key, column in value.items():
        if key not in ROW_KEYS:
            raise ValueError(f"columns: {key!r} is not a row key ({', '.join(ROW_KEYS)})")
        if not isinstance(column, str) or not column:
            raise ValueError(f"columns: {key} must name a column, got {column!r}")
    return tuple(sorted(value.items()))


def _from_text(text: str) -> dict[str, Any]:
    """`PATH,k=v,...`: options only where a part is `known_key=value` (a path may hold commas)."""
    parts = text.split(",")
    out: dict[str, Any] = {}
    columns: dict[str, str] = {}
    while len(parts) > 1 and "=" in parts[-1]:
        key, _, value = parts[-1].partition("=")
        key = key.strip()
        if key in OPTIONS:
            out.setdefault(key, value.strip())
        elif key in ROW_KEYS:
            columns.setdefault(key, value.strip())
        else:
            break
        parts.pop()
    out["path"] = ",".join(parts).strip()
    if columns:
        out["columns"] = columns
    return out


def parse_source(value: Any) -> Source:
    """A Source from its string or table form; ValueError naming the key otherwise."""
    if isinstance(value, Source):
        return value
    if isinstance(value, str):
        value = _from_text(value)
    if not isinstance(value, dict):
        raise ValueError(f"expected a path, a Hub id or a table with `path`, got {value!r}")
    unknown = sorted(set(value) - {"path", "columns", HUB, *OPTIONS})
    if unknown:
        known = ", ".join(("path", *OPTIONS, "columns"))
        raise ValueError(f"unknown key {unknown[0]!r} (a dataset takes {known})")
    path = value.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ValueError("path: a dataset needs a file, a folder or a Hub id")
    for key in ("config", "split", HUB):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise ValueError(f"{key}: expected a string, got {value[key]!r}")
    return Source(
        path=path.strip(),
        config=value.get("config") or None,
        split=value.get("split") or None,
        weight=_weight(value.get("weight", 1.0)),
        columns=_columns(value.get("columns") or {}),
        hub=value.get(HUB) or None,
    )


def sources_of(value: Any) -> list[Source]:
    """Every source of a `dataset` value: None -> [], one (string or table) -> [it], a
    list -> each; ValueError (naming the item of a list) for a bad one."""
    if value is None or value == "":
        return []
    if not isinstance(value, list):
        return [parse_source(value)]
    if not value:
        raise ValueError("an empty list names no dataset")
    out = []
    for i, item in enumerate(value):
        try:
            out.append(parse_source(item))
        except ValueError as exc:
            raise ValueError(f"[{i}]: {exc}") from None
    return out


def as_sources(dataset: list[Source] | str | os.PathLike[str]) -> list[Source]:
    """Sources, or one file's path taken as the only source."""
    if isinstance(dataset, (str, os.PathLike)):
        return [Source(os.fspath(dataset))]
    return list(dataset)


#: A folder source's limit: more entries than this is not a dataset folder (a typo'd `/`,
#: `~` or `/tmp`, which the app's preflight would otherwise walk and hash on every key).
MAX_FOLDER_ENTRIES = 20_000
#: The file kinds a folder source must hold one of (`datasets` reads these; .arrow: save_to_disk).
DATA_FILES = (".jsonl", ".json", ".ndjson", ".parquet", ".csv", ".tsv", ".txt", ".arrow")


def files_of(path: Path) -> list[Path]:
    """The files a local source is read from: the file, or every file under the folder
    (symlinks followed: a Hub snapshot's files point into its blobs), sorted. DataError
    for a folder that is not a dataset's: over MAX_FOLDER_ENTRIES entries (the walk stops
    there, so a symlink loop ends too) or no data file (DATA_FILES) in it."""
    if path.is_file():
        return [path]
    if not path.exists():  # os.walk of a missing path yields nothing: not "no data file"
        raise DataError(f"{path}: dataset file not found")
    out: list[Path] = []
    seen = 0
    for root, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .cache, .git
        seen += len(dirs) + len(names)
        if seen > MAX_FOLDER_ENTRIES:
            raise DataError(f"{path}: not a dataset folder (over {MAX_FOLDER_ENTRIES:,} files "
                            "and folders); name the data file or its own folder")  # fmt: skip
        out += [Path(root) / n for n in sorted(names) if not n.startswith(".")]
    if not any(f.suffix.lower() in DATA_FILES for f in out):
        raise DataError(f"{path}: a folder with no data file ({' '.join(DATA_FILES)}); "
                        "name a dataset file, a save_to_disk folder or a Hub id")  # fmt: skip
    return out


def fingerprint(sources: list[Source]) -> str:
    """sha256 over what the rows are made from: each source's options and its files'
    names (relative) and bytes; the same data under another path is the same."""
    import hashlib  # only with a dataset: OpenSSL's module costs a plain plan ~5 ms

    digest = hashlib.sha256(b"veri-datasets-v1\0")
    for src in sources:
        digest.update(repr((src.config, src.split, src.weight, src.columns)).encode() + b"\0")
        base = Path(src.path)
        for f in files_of(base):
            name = f.relative_to(base) if f != base else f.suffix  # the kind, not the name
            digest.update(str(name).encode() + b"\0")
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            digest.update(b"\0end\0")
    return digest.hexdigest()


def stat_key(sources: list[Source]) -> tuple[Any, ...]:
    """What changes when a source's files do (an in-process memo's key)."""
    out: list[Any] = []
    for src in sources:
        out.append(src)
        for f in files_of(Path(src.path)):
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)
