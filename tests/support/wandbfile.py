"""Read back what wandb wrote offline: a run's `run-<id>.wandb` file.

wandb keeps no reader of its own file in its public API (0.30), so tests read it the way its
tools do: a 7-byte file header (`:W&B`, a key, a version), then LevelDB's log format, records
cut across 32 KiB blocks, each piece behind a 7-byte header (CRC32, length, kind: 1 whole,
2 first, 3 middle, 4 last), each whole record one protobuf `Record` (wandb.proto).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEAD = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """Every whole record's bytes, in order."""
    raw = path.read_bytes()
    assert raw[:4] == b":W&B", f"{path}: not a wandb run file"
    pos, pieces, out = HEAD, b"", []
    while pos + HEAD <= len(raw):
        left = BLOCK - pos % BLOCK
        if left < HEAD:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", raw[pos : pos + HEAD])
        if length == 0 and kind == 0:
            break  # zeros: the end of what was written
        pieces += raw[pos + HEAD : pos + HEAD + length]
        pos += HEAD + length
        if kind in (FULL, LAST):
            out.append(pieces)
            pieces = b""
    return out


def read_run(run_dir: Path) -> dict[str, Any]:
    """A run folder's id, project, config and history (each row: key -> value, `_step` kept)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    run: dict[str, Any] = {"history": []}
    for data in records(path):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["id"], run["project"] = record.run.run_id, record.run.project
            run["config"] = {
                item.key: json.loads(item.value_json)
                for item in record.run.config.update
                if item.key != "_wandb"
            }
        elif kind == "history":
            row = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json)
                for item in record.history.item
            }
            run["history"].append(row)
    return run
