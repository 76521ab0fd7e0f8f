"""Dataset rows as the trainer reads and checks them, before any tokenizer sees them.

Standard library only: veri_tui/trainer/data.py tokenizes with them, and the planning core
(veri_tui/plan/tokens.py) counts the same rows for the plan's cost, so both read a dataset
by one set of rules and refuse a bad row with the same message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError


def read_rows(
    path: Path, loads: Callable[[str], Any] = json.loads
) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) for every non-empty line; DataError on unreadable JSON. `loads`
    parses one line (the planner passes pydantic_core's from_json, ~4x faster)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: dataset file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the dataset ({exc})") from None
    rows = [
        (no, parse_row(line, f"{path} line {no}", loads))
        for no, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not rows:
        raise DataError(f"{path}: the dataset has no rows")
    return rows


def parse_row(line: str, where: str, loads: Callable[[str], Any] = json.loads) -> dict[str, Any]:
    """One line as a JSON object; DataError naming `where` (file and line) otherwise."""
    try:
        row = loads(line)
    except ValueError as exc:
        raise DataError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object")
    return row


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-empty line, streamed: the lines and numbers that
    `read_rows` gives, without the whole file in memory (the token cache's ranks each parse
    only their own rows of it)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: dataset file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the dataset ({exc})") from None
    no = 0
    with fh:
        # Binary lines end after b"\n" only, which no multi-byte UTF-8 character contains;
        # str.splitlines then splits each at the other separators read_rows' splitlines
        # honours (\r, \x85, \u2028, ...), so the numbering is the same.
        for raw in fh:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}: cannot read the dataset (line {no + 1}: {exc})") from None
            for line in text.splitlines():
                no += 1
                if line.strip():
                    yield no, line


#: What an sft_text row must hold (veri_tui/trainer/data.py reads these shapes).
SFT_SHAPES = "an sft_text row needs `text`, `messages` or `prompt`+`completion`"


def columns_text(row: dict[str, Any]) -> str:
    """The row's columns as found: "`question`, `answer`" (or "no columns")."""
    return ", ".join(f"`{k}`" for k in row) or "no columns"


def no_shape(row: dict[str, Any], where: str) -> DataError:
    """The error of an sft_text row with none of the shapes, naming the columns it has."""
    return DataError(f"{where}: {SFT_SHAPES}; the row has {columns_text(row)}")


def text_field(row: dict[str, Any], key: str, where: str) -> str:
    """`row[key]` as a non-empty string, else DataError telling a missing column (and the
    columns there are), an empty cell and a value of another type apart."""
    value = row.get(key)
    if isinstance(value, str) and value:
        return value
    if key not in row:
        raise DataError(f"{where}: no `{key}` column (the row has {columns_text(row)})")
    if value is None or value == "":
        raise DataError(f"{where}: `{key}` is empty (fill it in or drop the row)")
    raise DataError(f"{where}: `{key}` must be a string, not {type(value).__name__}")


def lacking(row: dict[str, Any], method: str) -> tuple[str, ...] | None:
    """The keys `row` lacks to be read as a row of `method`: () none; the keys its shape
    misses (dpo's of `prompt`, `chosen`, `rejected`; `prompt` or `completion` beside the
    other); None for an sft_text row with no shape at all."""
    if method == "dpo":
        return tuple(k for k in ("prompt", "chosen", "rejected") if k not in row)
    if "messages" in row:
        return ()
    if "prompt" in row or "completion" in row:
        return tuple(k for k in ("prompt", "completion") if k not in row)
    return () if "text" in row else None


def check_messages(msgs: Any, where: str) -> list[dict[str, Any]]:
    """A `messages` list with roles, string contents and an assistant turn to train on."""
    if not isinstance(msgs, list) or not msgs:
        raise DataError(f"{where}: `messages` must be a non-empty list")
    for i, m in enumerate(msgs):
        ok = isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
        if not ok or not isinstance(m.get("content"), str):
            raise DataError(
                f"{where}: messages[{i}] needs a role (system/user/assistant) and string content"
            )
    if not any(m["role"] == "assistant" for m in msgs):
        raise DataError(f"{where}: `messages` has no assistant turn to train on")
    return msgs


def check_row(row: dict[str, Any], method: str, where: str) -> None:
    """The checks a row passes before any tokenizer sees it (the launch preflight's): the
    keys of its kind present, strings non-empty, messages well formed; DataError otherwise.
    The trainer raises the same messages as it encodes (veri_tui/trainer/data.py)."""
    if method == "dpo":
        for key in ("prompt", "chosen", "rejected"):
            text_field(row, key, where)
    elif "messages" in row:
        check_messages(row["messages"], where)
    elif "prompt" in row or "completion" in row:
        text_field(row, "prompt", where)
        text_field(row, "completion", where)
    elif "text" in row:
        text_field(row, "text", where)
    else:
        raise no_shape(row, where)
