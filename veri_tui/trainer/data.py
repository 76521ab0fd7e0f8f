"""Datasets: check and tokenize JSONL rows, and cut global batches.

sft_text rows carry `text`, or `messages` (rendered through the tokenizer's chat template,
loss on assistant turns only), or `prompt` + `completion` (loss on the completion only).
dpo rows carry `prompt`, `chosen`, `rejected`. Every row is checked before training: the
first bad one raises DataError naming the file and line. Batches are cut from a seeded
permutation per epoch, so every rank knows every global batch and reads only its part.
The trainer tokenizes once into the job folder's token cache (veri_tui/trainer/dataprep.py,
veri_tui/trainer/tokencache.py) and reads its rows from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from veri_tui.jobfolder.errors import DataError
from veri_tui.jobfolder.rows import check_messages, no_shape, read_rows
from veri_tui.jobfolder.rows import text_field as _str

IGNORE = -100


@dataclass
class Example:
    """One tokenized sequence; labels are IGNORE where no loss is taken. `positions` only
    for a packed row (veri_tui/trainer/packing.py): each sample's positions restart at 0."""

    input_ids: list[int]
    labels: list[int]
    positions: list[int] | None = None


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


def encode_sft(tok: Any, row: dict[str, Any], where: str, max_len: int) -> Example:
    """One sft_text row -> Example (EOS appended to text and completions)."""
    eos = [tok.eos_token_id]
    if "messages" in row:
        ex = _segments_to_example(_messages(tok, row, where), max_len)
    elif "prompt" in row or "completion" in row:
        p, c = _str(row, "prompt", where), _str(row, "completion", where)
        ex = _segments_to_example(
            [(_ids(tok, p, True), False), (_ids(tok, c, False) + eos, True)], max_len
        )
    elif "text" in row:
        ex = _segments_to_example(
            [(_ids(tok, _str(row, "text", where), True) + eos, True)], max_len
        )
    else:
        raise no_shape(row, where)
    if sum(lab != IGNORE for lab in ex.labels[1:]) == 0:
        raise DataError(f"{where}: no tokens left to train on within max_seq_length={max_len}")
    return ex


def encode_dpo(tok: Any, row: dict[str, Any], where: str, max_len: int) -> tuple[Example, Example]:
    """One dpo row -> (chosen, rejected) Examples sharing the prompt."""
    prompt = _ids(tok, _str(row, "prompt", where), True)
    pair = []
    for key in ("chosen", "rejected"):
        ex = _segments_to_example(
            [(prompt, False), (_ids(tok, _str(row, key, where), False) + [tok.eos_token_id], True)],
            max_len,
        )
        if sum(lab != IGNORE for lab in ex.labels[1:]) == 0:
            raise DataError(
                f"{where}: the prompt leaves no `{key}` tokens within max_length={max_len}"
            )
        pair.append(ex)
    return pair[0], pair[1]


def encode_row(tok: Any, row: dict[str, Any], where: str, method: str, max_len: int) -> Any:
    """One row of `method`: an Example (sft_text) or a (chosen, rejected) pair (dpo)."""
    if method == "dpo":
        return encode_dpo(tok, row, where, max_len)
    return encode_sft(tok, row, where, max_len)


def load_dataset(path: Path, method: str, tok: Any, max_len: int) -> list[Any]:
    """Check and tokenize the whole file in memory: Examples (sft_text) or (chosen, rejected)
    pairs. The trainer itself goes through the token cache (veri_tui/trainer/dataprep.py) instead;
    this is the reference its tests and the planner's token count are checked against."""
    rows = read_rows(path)
    return [encode_row(tok, row, f"{path} line {no}", method, max_len) for no, row in rows]


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The row order of one epoch: a permutation fixed by seed and epoch."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g).tolist()


def longest_first(order: list[int], lengths: list[int], count: int) -> list[int]:
    """``order`` with its ``count`` longest rows moved to the front, longest first (ties in
    their order), the rest as they were: the canary's first steps carry the worst case."""
    longest = sorted(range(len(order)), key=lambda k: -lengths[order[k]])[:count]
    chosen = set(longest)
    return [order[k] for k in longest] + [r for k, r in enumerate(order) if k not in chosen]


def global_batch(n: int, gbs: int, seed: int, step: int) -> list[int]:
    """Row indices of optimizer step `step` (0-based); the last partial batch is dropped."""
    per_epoch = n // gbs
    epoch, k = divmod(step, per_epoch)
    return epoch_order(n, seed, epoch)[k * gbs : (k + 1) * gbs]


def rank_slice(batch: list[int], micro: int, rank: int, dp: int, mbs: int) -> list[int]:
    """This rank's rows of micro-step `micro`: any mbs x ga x dp split covers `batch` once."""
    start = (micro * dp + rank) * mbs
    return batch[start : start + mbs]


def collate(examples: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence; padding carries no loss and no attention.

    Packed rows get `position_ids` instead of an attention mask: positions restart at 0 at
    every sample (and at the padding, a segment of its own), and transformers' masking
    (masking_utils `find_packed_sequence_indices`) makes the causal mask block-diagonal
    from them when no 2D mask is given, for sdpa, eager, flex and flash attention alike."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    packed = any(e.positions is not None for e in examples)
    positions = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        labels[i, :n] = torch.tensor(e.labels)
        mask[i, :n] = 1
        positions[i, :n] = torch.tensor(e.positions if e.positions is not None else range(n))
        positions[i, n:] = torch.arange(width - n)
    if packed:
        return {"input_ids": ids, "labels": labels, "position_ids": positions}
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
