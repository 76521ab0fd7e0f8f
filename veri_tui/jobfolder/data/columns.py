"""Column mapping: a dataset's own schema turned into the row keys the trainer reads.

The trainer reads `text`, `prompt` + `completion`, `messages` (role/content) for sft_text and
`prompt`, `chosen`, `rejected` for dpo (veri_tui/trainer/data.py). A source's `columns` renames its
columns to those keys; without one, the common schemas are recognised:

- Alpaca (`instruction`, optional `input`, `output`): `prompt` = the instruction, then a
  blank line and the input when there is one, then a blank line; `completion` = the output
  (the loss is taken on the output only);
- ShareGPT (`conversations`: `from`/`value` turns, from human, gpt or system): `messages`;
- rows that already have the trainer's keys are read as they are (other columns ignored).
"""

from __future__ import annotations

from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.rows import text_field

SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "chatgpt": "assistant", "bing": "assistant",
                  "bard": "assistant", "model": "assistant"}  # fmt: skip


def _sharegpt(turns: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: `conversations` must be a non-empty list")
    out = []
    for i, turn in enumerate(turns):
        role = SHAREGPT_ROLES.get(str(turn.get("from"))) if isinstance(turn, dict) else None
        if role is None:
            found = turn.get("from") if isinstance(turn, dict) else turn
            raise DataError(
                f"{where}: conversations[{i}] has from={found!r}; expected one of "
                "human, gpt, system"
            )
        out.append({"role": role, "content": turn.get("value")})
    return out


def _alpaca(row: dict[str, Any], where: str) -> dict[str, Any]:
    instruction, extra = text_field(row, "instruction", where), row.get("input")
    if extra is not None and not isinstance(extra, str):
        raise DataError(f"{where}: `input` must be a string")
    prompt = f"{instruction}\n\n{extra}\n\n" if extra else f"{instruction}\n\n"
    return {"prompt": prompt, "completion": row.get("output")}


def map_row(row: dict[str, Any], columns: tuple[tuple[str, str], ...], where: str
            ) -> dict[str, Any]:  # fmt: skip
    """The row under the trainer's keys: `columns` (row key, column) when given, else the
    schema recognised; DataError naming `where` for a column the row does not have."""
    if columns:
        missing = [col for _, col in columns if col not in row]
        if missing:
            import difflib  # only for this error

            have = ", ".join(sorted(row)) or "none"
            near = difflib.get_close_matches(missing[0], list(row), n=1, cutoff=0.75)
            typo = f"; did you mean {near[0]!r}?" if near else ""
            raise DataError(f"{where}: no column {missing[0]!r} (the row has: {have}){typo}")
        row = {key: row[col] for key, col in columns}
    msgs = row.get("messages")
    if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) and "from" in msgs[0]:
        return {**row, "messages": _sharegpt(msgs, where)}  # ShareGPT turns under `messages`
    if "messages" in row:
        return row
    if "conversations" in row:
        return {"messages": _sharegpt(row["conversations"], where)}
    if "instruction" in row and "output" in row:
        return _alpaca(row, where)
    return row
