"""Fused routed experts (transformers 5) read from, and written as, one tensor per expert.

transformers 5 builds a MoE layer's routed experts as two 3-D parameters,
`<block>.experts.gate_up_proj` [E, 2I, h] (each expert's gate rows, then its up rows) and
`<block>.experts.down_proj` [E, h, I]. Published checkpoints, and its own save_pretrained,
store one tensor per expert: `mlp.experts.<e>.gate_proj.weight` [I, h], `up_proj`,
`down_proj` (Qwen2/3-MoE, DeepSeek-V2/V3, OLMoE, ...), or Mixtral's
`block_sparse_moe.experts.<e>.w1/w3/w2.weight`. transformers fuses them while loading
(its conversion_mapping.py: MergeModulelist, then Concatenate on dim 1); the trainer's
sharded loader does the same here, and each rank reads only the experts its FSDP2 shard
holds (FSDP2 shards dim 0, the expert). The full fine-tune's artifact writes them back one
tensor per expert in the layout they were read in, so it loads wherever the base did.
transformers 4 keeps one nn.Linear per expert, whose names match the checkpoint: nothing
to do there. A checkpoint stored fused already (gpt-oss in bf16) matches by name too.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from veri_tui.jobfolder.contract.errors import ModelLoadError
from veri_tui.trainer.weights import Entry, read_rows

ATTR = "_veri_expert_layouts"  # model.__dict__: fused parameter name -> its Layout


class Layout(NamedTuple):
    """How a checkpoint names one fused parameter's pieces: `<block>.experts.<e>.<piece>.weight`
    for each piece, concatenated in this order along the expert slice's dim 0."""

    block: str
    pieces: tuple[str, ...]

    def keys(self, expert: int) -> list[str]:
        """Checkpoint keys of one expert's pieces."""
        return [f"{self.block}.experts.{expert}.{p}.weight" for p in self.pieces]


# fused parameter -> the per-expert pieces, per naming family (transformers' conversion
# mappings "qwen2_moe" and "mixtral", which Mixtral's block rename goes with).
PIECES = {
    "gate_up_proj": (("gate_proj", "up_proj"), ("w1", "w3")),
    "down_proj": (("down_proj",), ("w2",)),
}
BLOCK_RENAMES = ((".mlp", ".block_sparse_moe"),)


def find_layout(key: str, entries: dict[str, Entry], experts: int) -> Layout | None:
    """The per-expert layout a checkpoint stores fused parameter `key` in, or None."""
    block, sep, param = key.rpartition(".experts.")
    if not sep or param not in PIECES:
        return None
    blocks = [block] + [block[: -len(a)] + b for a, b in BLOCK_RENAMES if block.endswith(a)]
    for b in blocks:
        for pieces in PIECES[param]:
            layout = Layout(b, pieces)
            if all(k in entries for e in range(experts) for k in layout.keys(e)):
                return layout
    return None


def read_experts(
    layout: Layout, entries: dict[str, Entry], local: torch.Tensor, start: int
) -> None:
    """Fill `local`, the fused parameter's experts [start, start + len(local)), piece by piece."""
    for i in range(local.shape[0]):
        row, offset = local[i], 0
        for key in layout.keys(start + i):
            entry = entries[key]
            n = entry.shape[0]
            if tuple(entry.shape[1:]) != tuple(row.shape[1:]) or offset + n > row.shape[0]:
                raise ModelLoadError(
                    f"model {entry.file}: {key} has shape {list(entry.shape)}, which does not "
                    f"fit the fused expert slice {list(row.shape)}"
                )
            read_rows(entry, row[offset : offset + n], 0)
            offset += n
        if offset != row.shape[0]:
            raise ModelLoadError(
                f"model: the pieces {layout.keys(start + i)} fill {offset} of the "
                f"{row.shape[0]} rows of one fused expert"
            )


def unfused(t: torch.Tensor, layout: Layout) -> list[tuple[str, tuple[int, ...]]]:
    """The per-expert tensors (name, shape) a fused parameter `t` is written as."""
    rows = t.shape[1] // len(layout.pieces)
    return [(k, (rows, *t.shape[2:])) for e in range(t.shape[0]) for k in layout.keys(e)]


def split(whole: torch.Tensor, layout: Layout) -> list[torch.Tensor]:
    """The whole fused tensor's pieces, in `unfused` order (views, no copy)."""
    rows = whole.shape[1] // len(layout.pieces)
    return [
        whole[e, j * rows : (j + 1) * rows]
        for e in range(whole.shape[0])
        for j in range(len(layout.pieces))
    ]
