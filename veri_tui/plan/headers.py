"""Bounded reading of safetensors headers: shapes and dtypes, never tensor data.

The file layout is an 8-byte little-endian header length, a UTF-8 JSON header, then the
tensor bytes. We apply safetensors' own checks (header at most 100,000,000 bytes, JSON object
starting with `{`, offsets contiguous, sizes = shape x dtype, data covering the file) so a
hostile or truncated file is refused with one error naming it, before any large read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic_core import from_json

from veri_tui.errors import Refusal, VeriError

MAX_HEADER_BYTES = 100_000_000
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
# Sub-byte dtypes pack several elements per byte; their byte size is checked by ceil.
SUB_BYTE_BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


class TensorInfo(NamedTuple):
    """One tensor's name, dtype and shape as the header states them (a tuple: a 70B
    checkpoint has ~700 of them, and `veri-tui plan` makes them all at start-up)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Element count: the product of the shape (1 for a scalar)."""
        return math.prod(self.shape)


def _fail(path: Path, what: str) -> VeriError:
    return VeriError(Refusal(str(path), f"not a valid safetensors file: {what}"))


def _nbytes(dtype: str, numel: int) -> int | None:
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype] * numel
    if dtype in SUB_BYTE_BITS:
        return (SUB_BYTE_BITS[dtype] * numel + 7) // 8
    return None


def parse_header(raw: Mapping[str, object], path: Path, data_size: int | None) -> list[TensorInfo]:
    """Check a decoded header's entries and offsets; `data_size` None skips the EOF check."""
    # `type(x) is int` (not isinstance): JSON true/false must not pass as 1/0. Plain loops,
    # not generators: this runs once per tensor of every shard on each `veri-tui plan`.
    entries = []
    for name, meta in raw.items():
        if name == "__metadata__":
            continue
        if type(meta) is not dict:
            raise _fail(path, f"tensor {name!r} has no dtype/shape/data_offsets object")
        dtype, shape, offsets = meta.get("dtype"), meta.get("shape"), meta.get("data_offsets")
        if type(shape) is not list:
            raise _fail(path, f"tensor {name!r} has a bad shape {shape!r}")
        numel = 1
        for d in shape:
            if type(d) is not int or d < 0:
                raise _fail(path, f"tensor {name!r} has a bad shape {shape!r}")
            numel *= d
        nbytes = _nbytes(dtype, numel) if type(dtype) is str else None
        if type(dtype) is not str or nbytes is None:
            raise _fail(path, f"tensor {name!r} has an unknown dtype {dtype!r}")
        if type(offsets) is not list or len(offsets) != 2:
            raise _fail(path, f"tensor {name!r} has bad data_offsets {offsets!r}")
        begin, end = offsets
        if type(begin) is not int or type(end) is not int:
            raise _fail(path, f"tensor {name!r} has bad data_offsets {offsets!r}")
        if end - begin != nbytes:
            raise _fail(
                path, f"tensor {name!r}: offsets span {end - begin} bytes, shape needs {nbytes}"
            )
        entries.append((begin, end, TensorInfo(name, dtype, tuple(shape))))
    entries.sort()  # by (begin, end); names are unique, so a tie never goes further
    cursor = 0
    for begin, end, info in entries:
        if begin != cursor:
            raise _fail(path, f"tensor {info.name!r} starts at byte {begin}, expected {cursor}")
        cursor = end
    if data_size is not None and cursor != data_size:
        where = "past the end of the file" if cursor > data_size else "short of the end"
        raise _fail(path, f"tensor data ends at byte {cursor}, {where} ({data_size} data bytes)")
    return [e[2] for e in entries]


def read_header(path: Path) -> list[TensorInfo]:
    """The tensors of one local safetensors file, from its header only."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise _fail(path, f"{size} bytes, too short for the 8-byte header length")
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise _fail(path, f"header length {n} exceeds {MAX_HEADER_BYTES} bytes")
            if 8 + n > size:
                raise _fail(path, f"header length {n} runs past the end of the file ({size} bytes)")
            blob = f.read(n)
    except OSError as exc:
        raise VeriError(Refusal(str(path), f"cannot read: {exc.strerror or exc}")) from None
    if not blob.startswith(b"{"):
        raise _fail(path, "header is not a JSON object")
    try:
        # pydantic_core's parser (loaded with pydantic anyway) reads the bytes as UTF-8
        # JSON at twice json's speed, and `veri-tui plan` need not import json at all.
        raw = from_json(blob)
    except ValueError as exc:
        raise _fail(path, f"header is not UTF-8 JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise _fail(path, "header is not a JSON object")
    return parse_header(raw, path, size - 8 - n)
