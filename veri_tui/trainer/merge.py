"""A LoRA adapter merged into its base checkpoint, one tensor at a time.

The base is read with veri_tui/trainer/weights.py (`os.preadv`, no mmap: mapped pages would count
in VmRSS) and the merged checkpoint written with its ShardWriter, which knows every file's
header up front and appends tensor by tensor. A tensor without an adapter is copied
through in pieces of 64 MB at most (the embedding is never held whole); an adapted one is
read, merged in fp32, written and freed. Host memory holds the adapter (small) and at most
one adapted weight with its fp32 copy, never a shard, let alone the model
(benchmarks/bench_export.py measures VmHWM; docs/export.md has the figures). Run by
`veri-tui export --merge` as `python -m veri_tui.trainer.export merge` (veri_tui/trainer/export.py):
the launcher side imports no torch.
The merged files keep the base's shard layout, names and dtypes.

A LoRA linear computes W x + (alpha / r) B A x (peft's `scaling`; alpha / sqrt(r) with
rsLoRA), so its merged weight is W + scaling B A, computed in fp32 and stored in W's
dtype. Only plain LoRA on linear layers is merged (what the bundled trainer trains); any
other adapter key is refused by name.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch

from veri_tui.trainer.weights import (
    INDEX,
    SINGLE,
    Entry,
    Planned,
    ShardWriter,
    read_header,
    read_pieces,
    read_rows,
)

ADAPTER = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
#: The base model's non-weight files a checkpoint needs beside its shards.
MODEL_FILES = ("config.json", "generation_config.json")
PREFIX = "base_model.model."


class MergeError(ValueError):
    """An adapter or base that cannot be merged; the message is the user's one line."""


def _tensor(entries: dict[str, Entry], name: str) -> torch.Tensor:
    entry = entries[name]
    out = torch.empty(entry.shape, dtype=entry.dtype)
    read_rows(entry, out, 0)
    return out


def adapter_deltas(adapter_dir: Path) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], float]:
    """{base weight name: (A, B)} of a peft LoRA folder, and its scaling."""
    try:
        config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())
        entries = read_header(adapter_dir / ADAPTER)
    except (OSError, ValueError) as exc:
        raise MergeError(f"{adapter_dir}: not a LoRA adapter ({exc})") from None
    if config.get("peft_type") != "LORA" or config.get("fan_in_fan_out"):
        raise MergeError(f"{adapter_dir}: only plain LoRA adapters merge here")
    r = int(config["r"])
    alpha = float(config.get("lora_alpha") or r)
    scaling = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key in entries:
        stem, _, part = key.removeprefix(PREFIX).rpartition(".lora_")
        if not stem or part not in ("A.weight", "B.weight"):
            raise MergeError(f"{adapter_dir}: adapter tensor {key} is not a LoRA A/B weight; "
                            "it cannot be merged")  # fmt: skip
        pairs.setdefault(f"{stem}.weight", {})[part[0]] = _tensor(entries, key)
    deltas = {}
    for name, ab in pairs.items():
        if set(ab) != {"A", "B"}:
            raise MergeError(f"{adapter_dir}: {name} has lora_{''.join(ab)} only")
        deltas[name] = (ab["A"], ab["B"])
    return deltas, scaling


def base_files(base: Path) -> list[str]:
    """The base checkpoint's safetensors files, in order."""
    index = base / INDEX
    if index.is_file():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    if (base / SINGLE).is_file():
        return [SINGLE]
    raise MergeError(f"{base}: no model.safetensors or {INDEX}: cannot merge into it")  # fmt: skip


def merge_lora(base: Path, adapter_dir: Path, out: Path) -> dict[str, dict[str, int | str]]:
    """Write base + adapter into `out` (shards, index, config); their manifest entries."""
    deltas, scaling = adapter_deltas(adapter_dir)
    files = base_files(base)
    headers = [read_header(base / f) for f in files]
    unknown = sorted(set(deltas) - {n for h in headers for n in h})
    if unknown:
        raise MergeError(f"{adapter_dir}: adapts {unknown[0]}, which {base} does not have "
                        "(another base model?)")  # fmt: skip
    shards = [[Planned(n, e.dtype, e.shape) for n, e in h.items()] for h in headers]
    writer = ShardWriter(out, shards)
    writer.names = files  # the base's own file names (its index, if any, is written anew)
    for header, planned in zip(headers, shards, strict=True):
        for t in planned:
            if t.name not in deltas:  # copied through in pieces, never held whole
                writer.write_bytes(t.name, read_pieces(header[t.name], t.nbytes))
                continue
            weight = _tensor(header, t.name)
            a, b = deltas[t.name]
            merged = weight.float().addmm_(b.float(), a.float(), alpha=scaling)
            writer.write(t.name, merged.to(weight.dtype))
            del weight, merged
    written = writer.finish()
    for name in MODEL_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    return written
