"""`manifest.json`: the size and sha256 of every file of a checkpoint or artifact folder.

A safetensors file with a valid header and a zero-filled body loads without error (field
notes), so only the manifest catches it. Checkpoints and artifacts share this one format:
`{"files": {name: {"size": bytes, "sha256": hex}}, ...extra}`, written atomically last but
one (before the commit marker or the rename that makes the folder visible).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.atomic import write_text_atomic

MANIFEST = "manifest.json"
FileEntry = dict[str, Any]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (plain reads: page cache, not RSS)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def entry(path: Path) -> FileEntry:
    """{"size", "sha256"} of one file."""
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def listed(folder: Path) -> list[str]:
    """The folder's files a manifest covers (every plain file but the manifest), sorted."""
    return sorted(f.name for f in folder.iterdir() if f.is_file() and f.name != MANIFEST)


def write(folder: Path, known: dict[str, FileEntry] | None = None, **extra: Any) -> None:
    """Write the manifest of every file in `folder`; `known` entries are not hashed again."""
    known = known or {}
    files = {name: known.get(name) or entry(folder / name) for name in listed(folder)}
    write_text_atomic(folder / MANIFEST, json.dumps({**extra, "files": files}, indent=1))


def problems(folder: Path) -> list[str]:
    """What is wrong with the folder against its manifest, one line per file; [] if sound."""
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{folder / MANIFEST}: unreadable ({type(exc).__name__}: {exc})"]
    out = []
    for name, meta in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            out.append(f"{path}: missing")
        elif path.stat().st_size != meta["size"]:
            out.append(f"{path}: {path.stat().st_size} bytes, the manifest says {meta['size']}")
        elif sha256_file(path) != meta["sha256"]:
            out.append(f"{path}: sha256 differs from the manifest (damaged or zero-filled)")
    return out


def verify(folder: Path) -> bool:
    """Every file the manifest lists is there with its size and sha256."""
    return not problems(folder)
