"""Activation checkpointing as planned: "none", "full" (every decoder layer recomputed in
backward) or "selective" (torchtitan's op-level policy: within each layer, the outputs of
the attention kernel and of every other matmul are kept, everything else is recomputed).

Both modes use transformers' own per-layer checkpointing (non-reentrant
torch.utils.checkpoint around each decoder layer's forward, so FSDP2's hooks stay outside
it); selective adds a `context_fn` built with torch's public
`create_selective_checkpoint_contexts`. The policy is torchtitan's `_save_list` (mm and the
scaled-dot-product-attention kernels) with its "except every second mm" rule, counted per
layer in forward order (and again, the same way, in the recomputation): on a Llama layer
the q, v, gate and down projections' outputs are kept, k, o and up recomputed. A linear
with a bias (addmm) and LoRA's adapter matmuls count as matmuls too; a mixture of
experts' grouped expert matmuls are recomputed. veri_tui/plan/activations.py counts what it keeps
(tests/plan/test_saved_tensors.py measures it).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from veri_tui.jobfolder.knobs import CHECKPOINTING

MODES = CHECKPOINTING  # the schema's activation_checkpointing values
_aten = torch.ops.aten
# The attention kernels whose outputs selective checkpointing keeps (one is used per device).
_ATTENTION = tuple(
    getattr(_aten, name).default
    for name in (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    if hasattr(_aten, name)
)


# A linear runs as mm, or addmm when it has a bias (Qwen2's q, k, v): both count as mms.
_MM = (_aten.mm.default, _aten.addmm.default)


_Policy = Callable[..., CheckpointPolicy]
# torch leaves create_selective_checkpoint_contexts unannotated: a policy in, the forward's
# and the recomputation's context managers out.
_contexts = cast(Callable[[_Policy], tuple[Any, Any]], create_selective_checkpoint_contexts)


def _policy(counts: collections.Counter[str]) -> _Policy:
    """Keep attention outputs and every odd-numbered mm (1st, 3rd, ...) of the layer."""

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func in _ATTENTION:
            return CheckpointPolicy.MUST_SAVE
        if func in _MM:
            phase = "recompute" if ctx.is_recompute else "forward"
            counts[phase] += 1
            if counts[phase] % 2 == 1:
                return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def selective_context() -> tuple[Any, Any]:
    """A fresh pair of contexts for one checkpointed layer call (its own mm count)."""
    return _contexts(_policy(collections.Counter()))


def checkpoint_kwargs(mode: str) -> dict[str, Any] | None:
    """torch.utils.checkpoint's keyword arguments for this mode; None: no checkpointing."""
    if mode not in MODES:
        raise ValueError(f"activation_checkpointing: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "none":
        return None
    # Non-reentrant checkpointing works with FSDP2, DDP and frozen (LoRA) inputs.
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if mode == "selective":
        kwargs["context_fn"] = functools.partial(selective_context)
    return kwargs


def apply(model: nn.Module, mode: str) -> None:
    """Turn on this checkpointing mode for every decoder layer of a transformers model."""
    kwargs = checkpoint_kwargs(mode)
    if kwargs is None:
        return
    # transformers' methods, reached through nn.Module's __getattr__ (typed Tensor | Module).
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        enable = cast(Callable[..., None], model.activation_checkpointing_enable)
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        enable = cast(Callable[..., None], model.gradient_checkpointing_enable)
        enable(gradient_checkpointing_kwargs=kwargs)
