"""A row without the keys its method reads, told with the mapping that would read it.

The trainer reads `text`, `messages` or `prompt` + `completion` (sft_text) and `prompt`,
`chosen`, `rejected` (dpo) (veri_tui/jobfolder/data/rows.py). A dataset whose columns are named
otherwise (`question`/`answer`, a CSV header typo `completoin`) is refused on its first row
with the columns found and the source written with the mapping that would work, ready to
paste (`--dataset data.jsonl,prompt=question,completion=answer`, which a veri.toml's
`dataset` takes too): each missing key from a column of its name, one of its usual names
(SYNONYMS), else the nearest name (difflib: a typo, said so). Standard library
only: the planner, the launch preflight and the trainer read sources through it
(veri_tui/jobfolder/data/dataload.py).
"""

from __future__ import annotations

import shlex
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.rows import SFT_SHAPES, columns_text, lacking
from veri_tui.jobfolder.data.source import Source

#: The names datasets commonly give each row key's column, most telling first.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "prompt": ("question", "instruction", "input", "query", "problem", "context", "request",
               "source", "user", "human"),
    "completion": ("answer", "response", "output", "solution", "target", "reply", "assistant",
                   "gpt"),
    "text": ("content", "document", "body", "passage", "article", "sentence"),
    "messages": ("conversation", "dialog", "dialogue", "chat", "turns"),
    "chosen": ("preferred", "accepted", "winner", "positive", "chosen_response",
               "response_chosen", "good"),
    "rejected": ("dispreferred", "loser", "negative", "rejected_response", "response_rejected",
                 "bad"),
}  # fmt: skip

#: The shapes a row of each method can take, the likeliest first.
SHAPES = {"dpo": (("prompt", "chosen", "rejected"),),
          "sft_text": (("prompt", "completion"), ("text",), ("messages",))}  # fmt: skip


def _pick(key: str, columns: list[str], taken: set[str]) -> tuple[str, bool] | None:
    """The column to read `key` from, and whether it is only a near name (a typo)."""
    free = [c for c in columns if c not in taken]
    lower = {c.lower(): c for c in reversed(free)}  # the first of equal names wins
    for name in (key, *SYNONYMS.get(key, ())):
        if name in lower:
            return lower[name], False
    import difflib  # only for a row being refused

    near = difflib.get_close_matches(key, free, n=1, cutoff=0.75)
    return (near[0], True) if near else None


def suggest(columns: list[str], given: tuple[tuple[str, str], ...], method: str,
            lack: tuple[str, ...] | None
            ) -> tuple[dict[str, str], list[tuple[str, str]]] | None:  # fmt: skip
    """(row key -> column, the (column, key) pairs only near in name) that reads a row with
    `columns`:
    the `given` mapping kept, the keys in `lack` (every key of a shape when None) found;
    None when some key has no likely column."""
    mapped = dict(given)
    shapes = SHAPES.get(method, SHAPES["sft_text"])
    if lack:  # the row has a shape, short of these keys: complete that one
        shapes = tuple(s for s in shapes if set(lack) <= set(s))
    for shape in shapes:
        out, near = dict(mapped), []
        for key in shape:
            if key in out:
                continue
            if not given and key in columns:  # a mapping keeps only the keys it names
                out[key] = key
                continue
            found = _pick(key, columns, set(out.values()))
            if found is None:
                break
            out[key] = found[0]
            if found[1]:
                near.append((found[0], key))
        else:
            return {k: out[k] for k in shape}, near
    return None


def check_keys(raw: dict[str, Any], row: dict[str, Any], src: Source, method: str,
               where: str, first: bool) -> None:  # fmt: skip
    """DataError when the mapped `row` lacks the keys of `method`, naming the columns of
    the stored row `raw` and, on the source's `first` row (a later one differs from the
    rows before it: that row is wrong, not the names), the source written with the mapping
    that would read it."""
    lack = lacking(row, method)
    if lack == ():
        return
    has = columns_text(raw)
    found = suggest(list(raw), src.columns, method, lack)
    near = found[1] if found else []
    if near:  # a typo'd name: said beside the columns it was found among
        has += "; " + ", ".join(f"`{c}` looks like `{key}` misspelt" for c, key in near)
    if lack is None:
        problem = f"{SFT_SHAPES}; the row has {has}"
    else:
        problem = f"no {' or '.join(f'`{k}`' for k in lack)} column (the row has {has})"
    if not first:
        raise DataError(f"{where}: {problem}")
    if found is None:
        named = dict(src.columns)
        keys = [k for k in SHAPES.get(method, SHAPES["sft_text"])[0] if k not in named]
        example = ",".join(f"{k}=COLUMN" for k in keys)
        form = shlex.quote(f"{src.as_text()},{example}")
        raise DataError(f"{where}: {problem}; name the columns to read: --dataset {form} "
                        "(docs/datasets.md)")  # fmt: skip
    mapping = found[0]
    fixed = Source(src.hub or src.path, src.config, src.split, src.weight,
                   tuple(mapping.items()))  # fmt: skip
    form = shlex.quote(fixed.as_text())
    raise DataError(f"{where}: {problem}; map the columns: --dataset {form}")
