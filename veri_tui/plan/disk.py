"""Disk a job writes: its checkpoints at their most and the final artifact, as exact integers.

A checkpoint (veri_tui/trainer/checkpoint.py) is DCP's shards of what trains: the weights and
AdamW's two moments, at the precision's weight bytes (bf16: 2 + 2 + 2 = 6 bytes per parameter; fp32
masters: 4 + 4 + 4 = 12; a LoRA adapter, fp32 in either precision, 12); the DPO reference
and a LoRA's frozen base are not saved. DCP stores a tied embedding under both names
(measured: a tied Qwen3 checkpoint held the matrix twice), so a tied model's embedding
counts twice. Gradients are not saved. DCP writes every tensor (a weight, its two moments,
AdamW's step count) in its own framing and lists it in `.metadata`: about `ENTRY_BYTES` each
(measured on the tiny model: 1.6 KB of framing plus 0.3 KB of metadata), which matters only
for small models.

At most `keep_checkpoints` + 1 checkpoints exist at once: the kept ones plus the one being
written, until the oldest is purged after the new one commits; fewer when the job writes
fewer (`max_steps` // `checkpoint_steps`). The artifact (veri_tui/trainer/artifact.py) is the
weights in the trained dtype (each tied matrix once), or only the adapter for LoRA, plus the model
folder's tokenizer and config files when that folder is on this machine.

The launchers refuse a job whose disk cannot hold this (veri_tui/launch/diskcheck.py).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from veri_tui.plan.knobs import JobConfig
from veri_tui.plan.memory import trained_weight_bytes
from veri_tui.plan.model_info import ModelInfo

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".index.json")
ENTRY_BYTES = 2_000  # per tensor a checkpoint holds: DCP's framing and its .metadata entry
FIXED_BYTES = 48_000  # per checkpoint: optimizer settings, trainer_state, manifest, COMPLETE
HEADER_BYTES = 100  # per tensor of the artifact's safetensors header (+ 4 KB: manifest)
TENSORS_PER_LAYER = 12  # a decoder layer's weight tensors (attention, MLP, norms; biases)


def size(nbytes: int | float) -> str:
    """Bytes for a person: GB (10^9) with one decimal from 1 GB, else MB, else KB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1e3:.1f} KB"


class DiskEstimate(NamedTuple):
    """What the job writes: one checkpoint, how many exist at once, and the artifact."""

    checkpoint_bytes: int  # one checkpoint
    checkpoints: int  # the most that exist at once (0: checkpoint_steps unset)
    why: str  # how `checkpoints` was found, for the header line and refusals
    artifact_bytes: int

    @property
    def checkpoints_bytes(self) -> int:
        """Every checkpoint that exists at once."""
        return self.checkpoints * self.checkpoint_bytes

    @property
    def total_bytes(self) -> int:
        """Checkpoints plus artifact: what one disk holding both needs."""
        return self.checkpoints_bytes + self.artifact_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the plan record's `disk`)."""
        return {**self._asdict(), "total_bytes": self.total_bytes}

    def parts(self, with_checkpoints: bool = True, with_artifact: bool = True) -> str:
        """`3 checkpoints x 1.2 GB + artifact 0.4 GB`, the parts one disk holds."""
        out = []
        if with_checkpoints and self.checkpoints:
            out.append(f"{self.checkpoints} checkpoints x {size(self.checkpoint_bytes)}")
        if with_artifact and self.artifact_bytes:  # none on a multi-node job's other nodes
            out.append(f"artifact {size(self.artifact_bytes)}")
        return " + ".join(out)

    def line(self) -> str:
        """The plan's header line."""
        return f"disk: {size(self.total_bytes)} = {self.parts()} ({self.why})"


def _extra_files_bytes(path: str | None) -> int:
    """Tokenizer, config and other small files the artifact copies from the model folder."""
    if not path or not os.path.isdir(path):
        return 0
    total = 0
    with os.scandir(path) as entries:
        for e in entries:
            if e.is_file() and not e.name.endswith(WEIGHT_SUFFIXES):
                total += e.stat().st_size
    return total


def estimate_disk(
    info: ModelInfo,
    *,
    precision: str,
    lora_rank: int,
    checkpoint_steps: int | None,
    keep_checkpoints: int,
    max_steps: int | None,
) -> DiskEstimate:
    """Checkpoint and artifact bytes for this job (see the module docstring)."""
    w = trained_weight_bytes(precision, lora_rank)  # LoRA adapters are fp32
    if lora_rank > 0:
        trainable = info.adapter_parameters(lora_rank)
        saved_twice = 0
    else:
        trainable = info.parameter_count
        saved_twice = info.embedding_parameters if info.tied_embeddings else 0
    if lora_rank > 0:
        tensors = 2 * info.lora_target_count  # lora_A and lora_B per targeted linear
    else:
        tensors = TENSORS_PER_LAYER * info.layer_count + 3  # + embedding, final norm, head
    # Weights + AdamW m and v; each tensor saved with its two moments and a step count.
    checkpoint = 3 * w * trainable + w * saved_twice + 4 * tensors * ENTRY_BYTES + FIXED_BYTES
    artifact = w * trainable + tensors * HEADER_BYTES + 4_000 + _extra_files_bytes(info.path)
    if not checkpoint_steps:
        count, why = 0, "no checkpoints: checkpoint_steps unset"
    else:
        count = keep_checkpoints + 1
        why = f"keep_checkpoints={keep_checkpoints}, +1 while the next is written"
        written = max_steps // checkpoint_steps if max_steps else None
        if written is not None and written < count:
            count = written
            why = f"max_steps={max_steps} / checkpoint_steps={checkpoint_steps}"
    return DiskEstimate(checkpoint, count, why, artifact)


def disk_for(job: JobConfig, info: ModelInfo) -> DiskEstimate:
    """`estimate_disk` with the job's knobs (the job is validated: its precision is known)."""
    hp = job.hyperparameters
    return estimate_disk(
        info,
        precision=hp.precision,
        lora_rank=hp.lora_rank,
        checkpoint_steps=hp.checkpoint_steps,
        keep_checkpoints=hp.keep_checkpoints,
        max_steps=hp.max_steps,
    )
