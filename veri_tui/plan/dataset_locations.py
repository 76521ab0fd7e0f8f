"""A job's `dataset` and `eval_dataset` as sources on this machine
(veri_tui/jobfolder/data/source.py).

A local path is taken as it is (a relative one beside the veri.toml that names it); a Hub
id (`org/name`, not a path here) is looked up in the local HF cache first
(`datasets--org--name/snapshots/<refs/main>`, HF_HUB_CACHE, else HF_HOME/hub): its snapshot
folder is what is read, counted and uploaded. A Hub id not in the cache is downloaded by
`launch` (huggingface_hub's `snapshot_download`) unless HF_HUB_OFFLINE is set, which is one
error line saying how to fetch it; the planner never downloads (its cost waits for the
launch's copy). Standard library here; huggingface_hub only for that download.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.source import (
    DATA_FILES,
    Source,
    files_of,
    parse_source,
    sources_of,
)
from veri_tui.plan.model_sources import _offline, hub_cache_dir

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def cached_dataset(repo_id: str) -> Path | None:
    """The cached snapshot folder of a Hub dataset repo (refs/main's), or None."""
    repo = hub_cache_dir() / ("datasets--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        snap = repo / "snapshots" / ref.read_text().strip()
        return snap if snap.is_dir() else None
    snaps = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None  # a copied cache without refs: the newest


def is_hub_id(text: str) -> bool:
    """`org/name` that is not a file name (no data file suffix)."""
    return bool(HUB_ID.fullmatch(text)) and not text.lower().endswith(DATA_FILES)


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing repo: one line each
        first = (str(exc).strip().splitlines() or [""])[0]
        raise DataError(f"{repo_id}: cannot download the dataset ({type(exc).__name__}: "
                        f"{first})") from None  # fmt: skip


def resolve(src: Source, download: bool = False) -> Source:
    """The source with its path on this machine; DataError when there is none."""
    if src.hub:  # already resolved (a record's spec)
        return src
    path = Path(src.path).expanduser()
    if path.exists():
        if path.is_dir():
            files_of(path)  # DataError for a folder that holds no dataset (a typo'd `~`)
        return src.moved(path.resolve())
    if not is_hub_id(src.path):
        raise DataError(f"{src.path}: no such file or folder; pass a dataset file, a "
                        "save_to_disk folder or a Hub id (org/name)")  # fmt: skip
    snap = cached_dataset(src.path)
    if snap is None:
        if _offline():
            raise DataError(
                f"{src.path} is not in the local HF cache ({hub_cache_dir()}) and "
                f"HF_HUB_OFFLINE is set; run `hf download --repo-type dataset {src.path}` "
                "online, or unset HF_HUB_OFFLINE"
            )
        if not download:
            raise DataError(f"{src.path} is not in the local HF cache yet (launch downloads "
                            "it; or `hf download --repo-type dataset` it)")  # fmt: skip
        snap = _download(src.path)
    return src.moved(snap, hub=src.path)


def job_sources(job: Any, key: str = "dataset", download: bool = False) -> list[Source]:
    """The job's sources under `key` (dataset or eval_dataset), resolved on this machine;
    [] when it names none. DataError for one that is malformed or not here."""
    try:
        sources = sources_of(getattr(job, key, None))
    except ValueError as exc:
        raise DataError(f"{key}: {exc}") from None
    return [resolve(s, download) for s in sources]


def rebase(value: Any, base: Path) -> Any:
    """A `dataset` value from a file in folder `base`: each relative path that exists
    there made absolute (a Hub id or a missing path is left as written)."""
    try:
        sources = sources_of(value)
    except ValueError:
        return value  # the schema reports it
    moved, changed = [], False
    for src in sources:
        candidate = base / Path(src.path).expanduser()
        if not Path(src.path).is_absolute() and candidate.exists():
            src, changed = src.moved(candidate.resolve()), True
        moved.append(src.to_dict() if src.to_dict().keys() - {"path"} else src.path)
    if not changed:
        return value  # as written: absolute paths and Hub ids
    if isinstance(value, list):
        return moved
    return moved[0] if moved else value


def describe(sources: list[Source]) -> str:
    """`a.jsonl`, or `2 datasets: a.parquet x2, org/name (split train)` for a mixture."""
    names = [s.label + (f" x{s.weight:g}" if s.weight != 1 else "") for s in sources]
    return names[0] if len(names) == 1 else f"{len(names)} datasets: {', '.join(names)}"


__all__ = ["cached_dataset", "describe", "is_hub_id", "job_sources", "parse_source", "rebase",
           "resolve"]  # fmt: skip
