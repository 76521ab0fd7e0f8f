"""What the GPU check leaves in $OUT: four files, whatever happens, within what comes back.

A lent GPU machine gives back at most 8 files from $OUT, no deeper than 2 folders, each at
most 16 MiB (64 MiB together), named in letters, digits, '.', '_' and '-'
(/work/.library/device/README.md). So $OUT holds exactly:

- gpu_check.json: the device, the plan judged against, the verdict and one row per run;
- gpu_check.md: the table to paste;
- gpu_check.log: what the check printed (nvidia-smi first), as it went;
- gpu_check_runs.tar.gz: every run's logs and records (runs/<name>/..., the files
  gpu_check_files.bring_back copies into a staging folder outside $OUT), packed again after
  every run, each file's tail up to the cap that keeps the archive under `ARCHIVE_CAP`.

Each is replaced atomically (written beside, then renamed), so the check stopped at any
moment (the wrapper's timeout) leaves the figures of the runs done so far. `problems` says
what in a folder breaks those limits; the check runs it on $OUT at its end. Stdlib only.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

RESULTS, TABLE, LOG, ARCHIVE = (
    "gpu_check.json",
    "gpu_check.md",
    "gpu_check.log",
    ("gpu_check_runs.tar.gz"),
)
MAX_FILES, MAX_DEPTH = 8, 2  # files back from $OUT; folders below $OUT a file may sit in
FILE_CAP, TOTAL_CAP = 16 << 20, 64 << 20
ARCHIVE_CAP = 15 << 20  # under FILE_CAP, whatever the logs hold
NAME = re.compile(r"[A-Za-z0-9._-]+")


def problems(out: Path) -> list[str]:
    """What in `out` would not come back from a lent GPU machine (module docstring)."""
    found, total, files = [], 0, []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if not NAME.fullmatch(path.name):
            found.append(f"{rel}: a name other than letters, digits, '.', '_' and '-'")
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            found.append(f"{rel}: not a plain file or folder")
        elif path.is_file():
            files.append(rel)
            size = path.stat().st_size
            total += size
            if len(rel.parts) - 1 > MAX_DEPTH:
                found.append(f"{rel}: more than {MAX_DEPTH} folders down")
            if size > FILE_CAP:
                found.append(f"{rel}: {size} bytes, over {FILE_CAP}")
    if len(files) > MAX_FILES:
        found.append(f"{len(files)} files, over {MAX_FILES}: {', '.join(map(str, files))}")
    if total > TOTAL_CAP:
        found.append(f"{total} bytes in all, over {TOTAL_CAP}")
    return found


def write_atomic(path: Path, data: bytes) -> None:
    """`path` holds `data`, or what it held before: never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _tail(path: Path, cap: int) -> bytes:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= cap:
            return fh.read()
        fh.seek(size - cap)
        return b"[... %d bytes cut ...]\n" % (size - cap) + fh.read()


def pack(staging: Path, out: Path, cap: int = 2_000_000) -> int:
    """Pack everything under `staging` into out/ARCHIVE (each file's last `cap` bytes, less
    until the archive fits `ARCHIVE_CAP`); returns the cap used."""
    paths = sorted(p for p in staging.rglob("*") if p.is_file()) if staging.is_dir() else []
    while True:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for path in paths:
                data = _tail(path, cap)
                info = tarfile.TarInfo(str(path.relative_to(staging)))
                info.size, info.mtime = len(data), int(path.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))
        if buf.tell() <= ARCHIVE_CAP or cap <= 4096:
            write_atomic(out / ARCHIVE, buf.getvalue())
            return cap
        cap //= 4


class Log:
    """Print and keep: every line the check prints also goes to $OUT/gpu_check.log."""

    def __init__(self, out: Path | None) -> None:
        self.path = out / LOG if out is not None else None

    def say(self, text: str) -> None:
        print(text, flush=True)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
