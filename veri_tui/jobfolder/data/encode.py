"""Rows to token ids: the one set of rules the trainer encodes by and the launch checks by.

sft_text rows carry `text`, or `messages` (rendered through the tokenizer's chat template,
loss on assistant turns only), or `prompt` + `completion` (loss on the completion only).
dpo rows carry `prompt`, `chosen`, `rejected`. EOS is appended to a text, a completion and
each dpo answer; special tokens (a BOS) only at a sequence's start. A row whose labels hold
nothing to train on after the first position, within max_seq_length (dpo: max_length),
raises `NothingToTrain`, a DataError naming its file and line.

Standard library only, on any tokenizer object with transformers' call interface
(`tok(text, add_special_tokens=...)["input_ids"]`, `eos_token_id`, `chat_template`,
`apply_chat_template`): the ranks encode with the model's AutoTokenizer
(veri_tui/trainer/data.py, dataprep.py), and the launch's preflight runs these same
functions over every row with the same tokenizer where the job will run
(veri_tui/trainer/datacheck.py), before anything is created or paid for. What a model
folder needs for a tokenizer (`tokenizer_files`) is here too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.rows import check_messages, no_shape, text_field

IGNORE = -100

#: Files that hold a tokenizer's vocabulary, one of which AutoTokenizer needs (without one,
#: transformers 5 builds an empty tokenizer silently: every row then encodes to nothing).
VOCABULARY_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")
VOCABULARY_SUFFIXES = (".model", ".tiktoken")  # sentencepiece (tokenizer.model), tiktoken


class NothingToTrain(DataError):
    """A row that keeps no token to train on within the length limit (the prompt fills it)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


@dataclass
class Example:
    """One tokenized sequence; labels are IGNORE where no loss is taken. `positions` only
    for a packed row (veri_tui/trainer/packing.py): each sample's positions restart at 0."""

    input_ids: list[int]
    labels: list[int]
    positions: list[int] | None = None


def tokenizer_files(names: Iterable[str]) -> list[str]:
    """The vocabulary files among a model folder's file names (none: no usable tokenizer)."""
    return sorted(n for n in names if n in VOCABULARY_FILES or n.endswith(VOCABULARY_SUFFIXES))


def _ids(tok: Any, text: str, first: bool) -> list[int]:
    # Special tokens (e.g. a BOS) only at the start of a sequence, never between segments.
    return list(tok(text, add_special_tokens=first)["input_ids"])


def _segments_to_example(segments: list[tuple[list[int], bool]], max_len: int) -> Example:
    ids: list[int] = []
    labels: list[int] = []
    for seg, train in segments:
        ids += seg
        labels += seg if train else [IGNORE] * len(seg)
    return Example(ids[:max_len], labels[:max_len])


def _messages(tok: Any, row: dict[str, Any], where: str) -> list[tuple[list[int], bool]]:
    msgs = check_messages(row["messages"], where)
    if getattr(tok, "chat_template", None) is None:
        raise DataError(f"{where}: `messages` rows need a tokenizer with a chat template")
    segments: list[tuple[list[int], bool]] = []
    done = ""
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        # Render incrementally: the text up to the generation prompt is context, the rest of
        # the assistant turn (content and end marker) is what the loss is taken on.
        prompt = tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(msgs[: i + 1], tokenize=False)
        if not prompt.startswith(done) or not full.startswith(prompt):
            raise DataError(f"{where}: the chat template does not render turns as prefixes")
        segments.append((_ids(tok, prompt[len(done) :], not done), False))
        segments.append((_ids(tok, full[len(prompt) :], False), True))
        done = full
    return segments


def _trains(ex: Example) -> bool:
    """Whether any label after the first position is trained on (position 0 predicts
    nothing)."""
    return any(lab != IGNORE for lab in ex.labels[1:])


def encode_sft(tok: Any, row: dict[str, Any], where: str, max_len: int) -> Example:
    """One sft_text row -> Example (EOS appended to text and completions)."""
    eos = [tok.eos_token_id]
    if "messages" in row:
        ex = _segments_to_example(_messages(tok, row, where), max_len)
    elif "prompt" in row or "completion" in row:
        p, c = text_field(row, "prompt", where), text_field(row, "completion", where)
        ex = _segments_to_example(
            [(_ids(tok, p, True), False), (_ids(tok, c, False) + eos, True)], max_len
        )
    elif "text" in row:
        text = text_field(row, "text", where)
        ex = _segments_to_example([(_ids(tok, text, True) + eos, True)], max_len)
    else:
        raise no_shape(row, where)
    if not _trains(ex):
        raise NothingToTrain(
            f"{where}: no tokens left to train on within max_seq_length={max_len}", where
        )
    return ex


def encode_dpo(tok: Any, row: dict[str, Any], where: str, max_len: int) -> tuple[Example, Example]:
    """One dpo row -> (chosen, rejected) Examples sharing the prompt."""
    prompt = _ids(tok, text_field(row, "prompt", where), True)
    pair = []
    for key in ("chosen", "rejected"):
        answer = _ids(tok, text_field(row, key, where), False) + [tok.eos_token_id]
        ex = _segments_to_example([(prompt, False), (answer, True)], max_len)
        if not _trains(ex):
            raise NothingToTrain(
                f"{where}: the prompt leaves no `{key}` tokens within max_length={max_len}", where
            )
        pair.append(ex)
    return pair[0], pair[1]


def encode_row(tok: Any, row: dict[str, Any], where: str, method: str, max_len: int) -> Any:
    """One row of `method`: an Example (sft_text) or a (chosen, rejected) pair (dpo)."""
    if method == "dpo":
        return encode_dpo(tok, row, where, max_len)
    return encode_sft(tok, row, where, max_len)
