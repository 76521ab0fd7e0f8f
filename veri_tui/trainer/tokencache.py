"""The token cache's files: a tokenized dataset as flat arrays that ranks memory-map.

A cache folder (`<job_dir>/tokens/`, built by veri_tui/trainer/dataprep.py) holds one part per rank
that tokenized it; row i of the dataset (its i-th non-empty line) is in part `i % parts`, at
position `i // parts` there. Each part is three flat native-endian files:

- `part-<k>.ids`: int32 token ids of every sequence, one after another;
- `part-<k>.mask`: one uint8 per token, 1 where the loss is taken: a label is the token
  itself or IGNORE (veri_tui/trainer/data.py never makes another), so this is all the labels need;
- `part-<k>.offsets`: int64, sequence s of the part is `ids[offsets[s]:offsets[s+1]]`.

A dpo row is two sequences (chosen, then rejected); an sft_text row is one. `meta.json` holds the
key (what the tokens were made from: veri_tui/trainer/dataprep.py `cache_key`), the row count and
the layout; `manifest.json` (veri_tui/jobfolder/contract/manifest.py) the size and sha256 of every
file, meta.json included, so a damaged or truncated file is caught before a reuse.

Reading maps the files (`torch.from_file`, copy-on-write, paged in lazily): a rank touches
only the pages of the rows it asks for, and no rank holds the dataset as Python lists.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from veri_tui.jobfolder.contract.manifest import FileEntry
from veri_tui.trainer.data import IGNORE, Example

FORMAT = 1
META = "meta.json"
_KINDS = (("ids", "i", torch.int32), ("mask", "B", torch.uint8), ("offsets", "q", torch.int64))


class CacheError(ValueError):
    """A cache folder whose files do not add up (read as: rebuild it, never trust it)."""


def part_file(part: int, kind: str) -> str:
    """The file name of one array of one part: `part-<k>.<ids|mask|offsets>`."""
    return f"part-{part}.{kind}"


class PartWriter:
    """Streams one part's sequences into its three files, hashing as it writes (the
    manifest then needs no second read), and fsyncs them on close."""

    def __init__(self, folder: Path, part: int) -> None:
        self.names = {kind: part_file(part, kind) for kind, _, _ in _KINDS}
        self._files = {kind: open(folder / name, "wb") for kind, name in self.names.items()}
        self._hash = {kind: hashlib.sha256() for kind in self.names}
        self._size = dict.fromkeys(self.names, 0)
        self.rows = 0
        self.tokens = 0
        self._put("offsets", array.array("q", [0]))

    def _put(self, kind: str, data: array.array[int]) -> None:
        raw = data.tobytes()
        self._files[kind].write(raw)
        self._hash[kind].update(raw)
        self._size[kind] += len(raw)

    def add_row(self, encoded: Example | tuple[Example, Example]) -> None:
        """One row: an Example, or a dpo (chosen, rejected) pair."""
        for ex in encoded if isinstance(encoded, tuple) else (encoded,):
            mask = array.array("B", [lab != IGNORE for lab in ex.labels])
            pairs = zip(ex.input_ids, ex.labels, strict=True)
            if any(lab not in (tid, IGNORE) for tid, lab in pairs):
                raise ValueError("a label is neither its token nor IGNORE: a mask cannot hold it")
            self._put("ids", array.array("i", ex.input_ids))
            self._put("mask", mask)
            self.tokens += len(ex.input_ids)
            self._put("offsets", array.array("q", [self.tokens]))
        self.rows += 1

    def close(self) -> dict[str, FileEntry]:
        """Flush and fsync the files; their manifest entries {name: {size, sha256}}."""
        for fh in self._files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        return {
            name: {"size": self._size[kind], "sha256": self._hash[kind].hexdigest()}
            for kind, name in self.names.items()
        }

    def abandon(self) -> None:
        """Close without fsync (the build failed; the folder is removed)."""
        for fh in self._files.values():
            fh.close()


def _map(path: Path, dtype: torch.dtype, count: int) -> torch.Tensor:
    if count == 0:  # an empty part (more ranks than rows): nothing to map
        return torch.empty(0, dtype=dtype)
    return torch.from_file(str(path), shared=False, size=count, dtype=dtype)


class TokenCache(Sequence[Any]):
    """A committed cache folder, mapped: `cache[i]` is row i as veri_tui/trainer/data.py made it (an
    Example, or a (chosen, rejected) pair), equal to it token for token."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        try:
            self.meta: dict[str, Any] = json.loads((self.folder / META).read_text())
            self.rows, self.parts = int(self.meta["rows"]), int(self.meta["parts"])
            self.per_row = int(self.meta["sequences_per_row"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CacheError(f"{self.folder / META}: unreadable ({exc})") from None
        if self.meta.get("key", {}).get("byteorder") != sys.byteorder:
            raise CacheError(f"{self.folder}: written with another byte order")
        self._ids, self._mask, self._offsets = [], [], []
        for k in range(self.parts):
            seqs = len(range(k, self.rows, self.parts)) * self.per_row
            offsets = self._array(k, "offsets", torch.int64, 8, seqs + 1)
            tokens = int(offsets[-1])
            self._offsets.append(offsets)
            self._ids.append(self._array(k, "ids", torch.int32, 4, tokens))
            self._mask.append(self._array(k, "mask", torch.uint8, 1, tokens))

    def _array(self, part: int, kind: str, dtype: torch.dtype, width: int, n: int) -> torch.Tensor:
        path = self.folder / part_file(part, kind)
        size = path.stat().st_size if path.is_file() else -1
        if size != n * width:  # truncated, grown, or missing: never map past the end
            raise CacheError(f"{path}: {size} bytes where the layout needs {n * width}")
        return _map(path, dtype, n)

    def __len__(self) -> int:
        return self.rows

    def _sequence(self, part: int, s: int) -> Example:
        start, end = (int(x) for x in self._offsets[part][s : s + 2])
        ids = self._ids[part][start:end]
        labels = torch.where(self._mask[part][start:end].bool(), ids, IGNORE)
        return Example(ids.tolist(), labels.tolist())

    def __getitem__(self, i: int) -> Any:  # type: ignore[override]
        if not 0 <= i < self.rows:
            raise IndexError(i)
        part, j = i % self.parts, i // self.parts
        if self.per_row == 1:
            return self._sequence(part, j)
        return self._sequence(part, 2 * j), self._sequence(part, 2 * j + 1)

    def lengths(self) -> list[int]:
        """Every row's tokens (a dpo row's both sequences), from the offsets alone."""
        per_part = [
            self._offsets[k].diff().view(-1, self.per_row).sum(-1) for k in range(self.parts)
        ]
        return [int(per_part[i % self.parts][i // self.parts]) for i in range(self.rows)]

    def problems(self) -> list[str]:
        """What the layout's own rules find wrong (offsets that go back, masks other than 0
        and 1): the manifest's hashes catch damage, this catches a cache made wrongly."""
        out = []
        for k in range(self.parts):
            if int(self._offsets[k][0]) != 0 or bool((self._offsets[k].diff() < 0).any()):
                out.append(f"{self.folder / part_file(k, 'offsets')}: not increasing from 0")
            if bool((self._mask[k] > 1).any()):
                out.append(f"{self.folder / part_file(k, 'mask')}: a value other than 0 and 1")
        return out
