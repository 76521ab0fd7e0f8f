"""Safetensors files read and written in pieces: each rank reads only its rows, rank 0 streams.

Reading: the checkpoint's headers are parsed once (8-byte little-endian length, then a JSON
header: dtype, shape and data offsets per tensor, data after it). A rank fills a tensor, or
the rows [start, start + n) of dim 0 that its FSDP2 shard holds, with `os.preadv` straight
into the tensor's memory when the dtypes agree, else through a buffer of at most
`CHUNK_BYTES`. No mmap: mapped file pages count in VmRSS (field notes), plain reads do not.

Writing: `ShardWriter` knows every tensor's name, dtype and shape before the first byte (the
model's global shapes), so it writes each file's header first and then appends tensor by
tensor as they are gathered, hashing as it goes: rank 0 never holds more than one tensor.
Files follow the Hugging Face layout (`model.safetensors`, or `model-0000k-of-0000n.
safetensors` + `model.safetensors.index.json`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import is_fake

from veri_tui.jobfolder.contract.errors import ModelLoadError

DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
CHUNK_BYTES = 64 << 20  # the most a dtype-converting read buffers at once
MAX_HEADER = 100_000_000  # safetensors' own limit
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@dataclass(frozen=True)
class Entry:
    """Where one tensor lives: file, dtype, shape and the absolute offset of its data."""

    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int


def read_header(path: Path) -> dict[str, Entry]:
    """The tensors of one safetensors file; ModelLoadError naming the file if malformed."""
    try:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > MAX_HEADER:
                raise ValueError(f"header length {length} is over {MAX_HEADER}")
            header = json.loads(fh.read(length))
    except (OSError, ValueError, struct.error) as exc:
        raise ModelLoadError(f"model {path}: unreadable safetensors header ({exc})") from None
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta.get("dtype") not in DTYPES:
            raise ModelLoadError(f"model {path}: {name} has dtype {meta.get('dtype')!r}")
        begin, _ = meta["data_offsets"]
        dtype, shape = DTYPES[meta["dtype"]], tuple(meta["shape"])
        out[name] = Entry(path, dtype, shape, 8 + length + begin)
    return out


def checkpoint_entries(folder: Path) -> dict[str, Entry]:
    """Every tensor of a model folder (sharded index or single file), by checkpoint key."""
    index = folder / INDEX
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [SINGLE]
    entries: dict[str, Entry] = {}
    for name in files:
        entries.update(read_header(folder / name))
    return entries


def read_pieces(entry: Entry, nbytes: int, piece: int = CHUNK_BYTES) -> Iterator[memoryview]:
    """A tensor's `nbytes` raw bytes in pieces of at most `piece` bytes, through one reused
    buffer: each piece is valid until the next is read."""
    buf = memoryview(bytearray(min(piece, max(nbytes, 1))))
    fd = os.open(entry.file, os.O_RDONLY)
    try:
        for start in range(0, nbytes, piece):
            view = buf[: min(piece, nbytes - start)]
            _preadv(fd, view, entry.offset + start, entry.file)
            yield view
    finally:
        os.close(fd)


def _bytes_view(t: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes, in place (no copy)."""
    # numpy's stubs give ndarray __buffer__ only for Python >= 3.12; the buffer protocol is
    # there at runtime on 3.11 too.
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]


def _read_into(fd: int, t: torch.Tensor, offset: int, path: Path) -> None:
    """Read `t`'s bytes from the file at `offset`, in place; a fake tensor (a trace,
    veri_tui/trainer/fakecuda) has shape and dtype only: every other step of the load runs,
    the read has nowhere to land."""
    if not is_fake(t):
        _preadv(fd, _bytes_view(t), offset, path)


def _preadv(fd: int, view: memoryview, offset: int, path: Path) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise ModelLoadError(f"model {path}: file ends early (truncated?)")
        done += got


def read_rows(entry: Entry, dst: torch.Tensor, start: int) -> None:
    """Fill `dst` with rows [start, start + len(dst)) of the tensor (dim 0; all of a 0-d one)."""
    if dst.numel() == 0:
        return
    row_elems = math.prod(entry.shape[1:])
    row_bytes = row_elems * entry.dtype.itemsize
    fd = os.open(entry.file, os.O_RDONLY)
    try:
        offset = entry.offset + start * row_bytes
        direct = dst.device.type == "cpu" and dst.dtype == entry.dtype and dst.is_contiguous()
        if direct:  # the bytes land in the parameter itself: no second copy
            _read_into(fd, dst, offset, entry.file)
            return
        rows = dst.shape[0] if dst.dim() else 1
        step = max(1, CHUNK_BYTES // max(row_bytes, 1))
        buf = torch.empty((min(step, rows), *entry.shape[1:]), dtype=entry.dtype)
        flat = dst.view(rows, -1)  # a view: an error, never a silent copy, if it cannot be
        for r in range(0, rows, step):
            n = min(step, rows - r)
            part = buf[:n]
            _read_into(fd, part, offset, entry.file)
            flat[r : r + n].copy_(part.reshape(n, -1))
            offset += n * row_bytes
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Planned:
    """One tensor of an artifact: its name, dtype and global shape."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of its data."""
        return math.prod(self.shape) * self.dtype.itemsize


def plan_shards(tensors: list[Planned], max_bytes: int) -> list[list[Planned]]:
    """Greedy in order, as Hugging Face splits: a new file when the next tensor would overflow."""
    shards: list[list[Planned]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def shard_names(count: int) -> list[str]:
    """`model.safetensors` alone, else `model-0000k-of-0000n.safetensors`."""
    if count == 1:
        return [SINGLE]
    return [f"model-{k:05d}-of-{count:05d}.safetensors" for k in range(1, count + 1)]


def _header(shard: list[Planned]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    pos = 0
    for t in shard:
        header[t.name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape)}
        header[t.name]["data_offsets"] = [pos, pos + t.nbytes]  # type: ignore[index]
        pos += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(raw)) + raw


class ShardWriter:
    """Append tensors, in plan order, to the shard files of `folder`; hashes as it writes."""

    def __init__(self, folder: Path, shards: list[list[Planned]]) -> None:
        self.folder, self.shards = folder, shards
        self.names = shard_names(len(shards))
        self.files: dict[str, dict[str, int | str]] = {}
        self._k, self._i = -1, 0
        self._fh: io.BufferedWriter | None = None
        self._sha = hashlib.sha256()

    def _open_next(self) -> None:
        self._close()
        self._k, self._i = self._k + 1, 0
        self._fh = open(self.folder / self.names[self._k], "wb")  # noqa: SIM115 - kept open
        self._sha = hashlib.sha256()
        self._emit(_header(self.shards[self._k]))

    def _emit(self, data: bytes | memoryview) -> None:
        assert self._fh is not None
        self._fh.write(data)
        self._sha.update(data)

    def _close(self) -> None:
        if self._fh is None:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        name = self.names[self._k]
        size = (self.folder / name).stat().st_size
        self.files[name] = {"size": size, "sha256": self._sha.hexdigest()}
        self._fh = None

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """The next planned tensor's data (on any device; copied to the CPU if needed)."""
        if self._fh is None or self._i == len(self.shards[self._k]):
            self._open_next()
        want = self.shards[self._k][self._i]
        if (name, tensor.dtype, tuple(tensor.shape)) != (want.name, want.dtype, want.shape):
            raise RuntimeError(f"artifact: got {name} where the plan has {want.name}")
        self._emit(_bytes_view(tensor.detach().to("cpu").contiguous()))
        self._i += 1

    def write_bytes(self, name: str, pieces: Iterable[bytes | memoryview]) -> None:
        """The next planned tensor's data as raw bytes in pieces (a tensor copied through
        unchanged, never held whole: veri_tui/export/merge.py)."""
        if self._fh is None or self._i == len(self.shards[self._k]):
            self._open_next()
        want = self.shards[self._k][self._i]
        if name != want.name:
            raise RuntimeError(f"artifact: got {name} where the plan has {want.name}")
        size = 0
        for piece in pieces:
            self._emit(piece)
            size += len(piece)
        if size != want.nbytes:
            raise RuntimeError(f"artifact: {name} got {size} bytes, the plan has {want.nbytes}")
        self._i += 1

    def finish(self) -> dict[str, dict[str, int | str]]:
        """Close the last file, write the index when sharded; size + sha256 of each file."""
        self._close()
        if len(self.shards) > 1:
            pairs = zip(self.names, self.shards, strict=True)
            weight_map = dict(sorted((t.name, n) for n, s in pairs for t in s))
            total = sum(t.nbytes for s in self.shards for t in s)
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (self.folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return self.files
