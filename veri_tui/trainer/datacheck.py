"""The launch's check of the job's rows with the model's tokenizer, where the job will run.

Run before anything is created or paid for (veri_tui/launch/datacheck.py starts it): on this
machine as `python -m veri_tui.trainer.datacheck`, on an SSH host or a Slurm login node as
`python -c BOOT` with this module and the few stdlib ones it needs sent on stdin beside the
rows (nothing is written there). Its input is one zlib-compressed JSON object on stdin:
`model` (the folder there), `method`, `max_length` (max_seq_length, or dpo's max_length),
`limit` (how many bad rows to name), and per part (`train`, `eval`) either `sources`
(veri_tui/jobfolder/data/source.py dicts, read here) or `rows` ([where, row] pairs read by the
launcher). It prints one JSON line: the tokenizer's class, the problems (key, message), and
per part the rows and each training row's tokens (what packing and the global batch count).

The tokenizer is loaded as the ranks load it (AutoTokenizer.from_pretrained, veri_tui/
trainer/model.py `load_tokenizer`) and must give ids for a probe string and have an EOS
(transformers 5 builds an empty tokenizer from a folder without tokenizer files: every row
would encode to nothing); every row is then encoded by the ranks' own rules
(veri_tui/jobfolder/data/encode.py). torch is kept out of this process (a tokenizer needs none;
about a second of imports saved), unless transformers cannot load the tokenizer without it.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Iterator
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.encode import NothingToTrain, encode_row

PROBE = "Hello, world! 12 apples."
SAVE_IT = "AutoTokenizer.from_pretrained(BASE_MODEL).save_pretrained"


def _load(model: str) -> Any:
    """AutoTokenizer of `model`, first with torch kept out (None in sys.modules: transformers
    then sees no torch), else again with it."""
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model)
    except Exception:
        if not blocked:
            raise
        for name in [m for m in sys.modules if m.startswith("transformers")]:
            del sys.modules[name]  # a tokenizer class that wants torch: import it afresh
        sys.modules.pop("torch", None)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model)
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]  # `datasets` may import it to read a Parquet file


def tokenizer_problem(tok: Any, model: str) -> str | None:
    """Why the tokenizer cannot encode the job's rows, or None."""
    try:
        ids = tok(PROBE, add_special_tokens=False)["input_ids"]
    except Exception as exc:  # noqa: BLE001 - the Rust side raises a plain Exception
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"the tokenizer in {model} fails on {PROBE!r} ({first}); save a working one there"
    if not ids:
        return (f"the tokenizer in {model} gives no token ids for {PROBE!r} (an empty "
                f"tokenizer: no vocabulary there); save the base model's tokenizer into it: "
                f"{SAVE_IT}('{model}')")  # fmt: skip
    if tok.eos_token_id is None:
        return (f"the tokenizer in {model} has no eos_token (each text and completion ends "
                "with one); set eos_token in its tokenizer_config.json")  # fmt: skip
    return None


def _rows(part: dict[str, Any], method: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if "rows" in part:
        yield from ((str(where), row) for where, row in part["rows"])
        return
    from veri_tui.jobfolder.data.dataload import mixed_rows
    from veri_tui.jobfolder.data.source import sources_of

    yield from mixed_rows(sources_of(part["sources"]), method=method)


def places(wheres: list[str]) -> str:
    """`a.jsonl lines 7, 18; b.csv row 3`: the rows named by file, in their order."""
    groups: dict[str, list[str]] = {}
    for where in wheres:
        head, _, number = where.rpartition(" ")
        file, _, unit = head.rpartition(" ")
        if not file or not number.isdigit():
            groups.setdefault(where, [])
            continue
        groups.setdefault(f"{file} {unit}", []).append(number)
    out = []
    for name, numbers in groups.items():
        if len(numbers) > 1:
            file, _, unit = name.rpartition(" ")
            out.append(f"{file} {unit}s {', '.join(numbers)}")
        else:
            out.append(f"{name} {numbers[0]}" if numbers else name)
    return "; ".join(out)


def _empty_message(empty: list[str], count: int, total: int, data: dict[str, Any]) -> str:
    knob = "max_length" if data["method"] == "dpo" else "max_seq_length"
    length, shown = data["max_length"], places(empty)
    more = f" and {count - len(empty)} more" if count > len(empty) else ""
    verb = "has" if count == 1 else "have"
    return (f"{count} of {total} rows {verb} no tokens to train on within {knob}={length} (the "
            f"prompt fills it): {shown}{more}; raise {knob} (--set {knob}=N), or shorten or "
            "drop those rows")  # fmt: skip


def check_part(tok: Any, part: dict[str, Any], key: str, data: dict[str, Any]) -> dict[str, Any]:
    """Encode every row of one part: its rows, training rows' tokens, and its problems."""
    lengths: list[int] = []
    empty: list[str] = []
    count = total = 0
    problems = []
    try:
        for where, row in _rows(part, data["method"]):
            total += 1
            try:
                ex = encode_row(tok, row, where, data["method"], data["max_length"])
            except NothingToTrain as exc:
                count += 1
                if len(empty) < data["limit"]:
                    empty.append(exc.where)
                continue
            lengths.append(len(ex.input_ids) if data["method"] != "dpo" else 0)
    except DataError as exc:
        problems.append([key, exc.message])
    if count:
        problems.append([key, _empty_message(empty, count, total, data)])
    return {"rows": total, "lengths": lengths, "problems": problems}


def run(data: dict[str, Any]) -> dict[str, Any]:
    """The check of one payload (see the module's docstring)."""
    model = data["model"]
    try:
        tok = _load(model)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        failed = ["model", f"{model}: cannot load the tokenizer ({first})"]
        return {"problems": [failed], "checked": True}
    out: dict[str, Any] = {"tokenizer": type(tok).__name__, "problems": [], "checked": True}
    problem = tokenizer_problem(tok, model)
    if problem is not None:
        out["problems"].append(["model", problem])
        return out
    for name, key in (("train", "dataset"), ("eval", "eval_dataset")):
        if data.get(name):
            out[name] = check_part(tok, data[name], key, data)
            out["problems"] += out[name].pop("problems")
    return out


def main() -> int:
    """Read the payload on stdin, print the answer as one JSON line."""
    data = json.loads(zlib.decompress(sys.stdin.buffer.read()))
    print(json.dumps(run(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
