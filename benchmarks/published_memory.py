"""Published, measured peak GPU memory of fine-tuning runs: the data benchmarks/
estimate_accuracy.py sets the plan's peak against (docs/accuracy.md, Peak memory).

Every figure is quoted from the file it came from (repository, path, commit read), and so is
every fact of how the run held memory that differs from the bundled trainer (its loss, its
LoRA dropout, its optimizer's layout, its quantisation): `facts` names them, and
MEMORY_FACTS quotes each. A run whose layout the knobs cannot express (DeepSpeed's
full-parameter buffers, sums over GPUs, torch.compile) is listed with `judged=False` and
the reason; nothing here is fitted.

The records are kept by source: published_tables.py (the Qwen README's single-GPU rows,
torchtitan, torchtune, LitGPT), published_zero.py (ms-swift under DeepSpeed ZeRO-2/3),
published_docs.py (peft's docs, ChatGLM3's and GLM-4's READMEs) and published_fsdp2.py
(ms-swift's FSDP2 and LoRA examples), their types in published_types.py; this module
gathers them in that order.
"""

from __future__ import annotations

import published_docs
import published_fsdp2
import published_tables
import published_zero
from published_types import Fact, MemRun, Unexpressed, qwen_tensors

__all__ = ["HEADERS", "MEMORY_FACTS", "NOT_EXPRESSED", "RUNS", "SHAPES", "Fact", "MemRun",
           "Unexpressed", "qwen_tensors"]  # fmt: skip

# Gathered in the order their figures and facts are reported (docs/accuracy.md).
_tables, _zero, _docs, _fsdp2 = published_tables, published_zero, published_docs, published_fsdp2
RUNS: list[MemRun] = [*_tables.RUNS, *_zero.RUNS, *_fsdp2.RUNS]
MEMORY_FACTS: dict[str, Fact] = {**_tables.MEMORY_FACTS, **_zero.MEMORY_FACTS,
                                 **_fsdp2.MEMORY_FACTS}  # fmt: skip
NOT_EXPRESSED: list[Unexpressed] = [
    *_tables.NOT_EXPRESSED,
    *_zero.NOT_EXPRESSED,
    *_docs.NOT_EXPRESSED,
    *_fsdp2.NOT_EXPRESSED,
]
SHAPES = {**_tables.SHAPES, **_zero.SHAPES, **_fsdp2.SHAPES}
HEADERS = {**_tables.HEADERS, **_zero.HEADERS}
