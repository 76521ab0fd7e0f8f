"""The smoke generation: base and tuned answer a few of the job's own prompts.

The prompts are the job's first rows, rendered as the trainer rendered them (veri_tui/trainer/
data.py): a `messages` row up to its first assistant turn through the tokenizer's chat
template with the generation prompt, a `prompt` row's prompt as is, a `text` row's first
half. Both models decode greedily (do_sample off: the same text on every run), so the
tuned column differs from the base one only by what training changed. Run by `veri-tui
export` as `python -m veri_tui.trainer.export smoke` (veri_tui/trainer/export.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.dataload import mixed_rows
from veri_tui.jobfolder.data.source import Source

if TYPE_CHECKING:
    from torch import nn

PROMPTS = 3
NEW_TOKENS = 24


def rendered(row: dict[str, Any], tok: Any) -> str | None:
    """The row's prompt as the model saw it in training, or None (nothing to prompt with)."""
    if "messages" in row and getattr(tok, "chat_template", None):
        msgs = row["messages"]
        first = next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), None)
        if not first:
            return None
        return str(tok.apply_chat_template(msgs[:first], tokenize=False,
                                           add_generation_prompt=True))  # fmt: skip
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(row.get("text"), str):
        words = row["text"].split()
        return " ".join(words[: max(1, len(words) // 2)])
    return None


def prompts(sources: list[Source], tok: Any, count: int = PROMPTS) -> list[str]:
    """Up to `count` prompts from the job's first rows (none when the data is not here)."""
    out: list[str] = []
    try:
        for _, row in mixed_rows(sources):
            text = rendered(row, tok)
            if text:
                out.append(text)
            if len(out) == count:
                break
    except (OSError, DataError):
        return out  # the data stayed on another machine: the card says no smoke test ran
    return out


def generate(model: Any, tok: Any, text: str, new_tokens: int = NEW_TOKENS) -> str:
    """Greedy continuation of `text` (the prompt's tokens as the trainer made them)."""
    import torch

    enc = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id)  # fmt: skip
    return str(tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))


def smoke(base: Path, tuned: Path, adapter: bool, texts: list[str]) -> list[dict[str, str]]:
    """{prompt, base, tuned} per prompt; `tuned` is a model folder, or with `adapter` a
    peft adapter folder over `base`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    # transformers leaves disable_progress_bar and PreTrainedModel.eval unannotated: typed
    # here as what they are (a no-argument call; an nn.Module, whose eval is typed). The
    # "Loading weights" bars would bury the smoke lines.
    cast(Callable[[], None], logging.disable_progress_bar)()
    tok = AutoTokenizer.from_pretrained(tuned)
    model = cast("nn.Module", AutoModelForCausalLM.from_pretrained(base)).eval()
    before = [generate(model, tok, t) for t in texts]
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, tuned).eval()
    else:
        model = cast("nn.Module", AutoModelForCausalLM.from_pretrained(tuned)).eval()
    after = [generate(model, tok, t) for t in texts]
    return [{"prompt": p, "base": b, "tuned": a} for p, b, a in zip(texts, before, after,
                                                                    strict=True)]  # fmt: skip
