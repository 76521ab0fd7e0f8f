"""The attention kernel a GPU would pick, picked for fake CUDA tensors.

`scaled_dot_product_attention` chooses its kernel in C++ from the device's properties
(`_fused_sdp_choice_stub`); with no device behind a fake CUDA tensor the choice falls to
the math kernel, which materialises the S x S attention matrix: at 8B x 2048 tokens the
activations come out 32.3 GiB instead of 13.6 (../shared/docs/fake-cuda.md). `chosen`
routes each call as torch 2.13's priority order does on an H100 (flash, then memory-
efficient, then math: `torch._C._get_sdp_priority_order()`), by the kernels' documented
constraints:

- flash: fp16/bf16, no attention mask (causal or not), head size a multiple of 8 up to
  256 (grouped-query heads allowed: transformers passes enable_gqa only then);
- memory-efficient: any mask (a boolean one made additive, as SDPA does), fp32 too, the
  same number of query and key heads (transformers repeats the key/value heads when a mask
  is given);
- math otherwise.

Under autocast the inputs are cast first, as autocast casts SDPA's. What a real H100 picks
(cuDNN attention is behind math in 2.13's order) is for benchmarks/gpu_check.sh to confirm;
the sizes these kernels save are flash's and the efficient kernel's own (a log-sum-exp per
query row).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

_aten = torch.ops.aten
_HALF = (torch.float16, torch.bfloat16)


def kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any, gqa: bool) -> str:
    """ "flash", "efficient" or "math", by the module docstring's rules."""
    hd = q.shape[-1]
    if mask is None and q.dtype in _HALF and hd == v.shape[-1] and hd % 8 == 0 and hd <= 256:
        return "flash"
    if q.shape[-3] == k.shape[-3] or not gqa:
        return "efficient"
    return "math"


def _attention(
    original: Callable[..., torch.Tensor], counts: dict[str, int]
) -> Callable[..., torch.Tensor]:
    def sdpa(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        if query.device.type != "cuda":
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)  # fmt: skip
        if torch.is_autocast_enabled("cuda"):
            dtype = torch.get_autocast_dtype("cuda")
            query, key, value = (t.to(dtype) for t in (query, key, value))
        choice = kernel(query, key, value, attn_mask, enable_gqa)
        counts[choice] = counts.get(choice, 0) + 1
        if choice == "flash":
            out = _aten._scaled_dot_product_flash_attention(
                query, key, value, dropout_p, is_causal, False, scale=scale
            )
            return out[0]  # type: ignore[no-any-return]
        if choice == "efficient":
            bias = attn_mask
            if bias is not None and bias.dtype == torch.bool:
                bias = torch.zeros(bias.shape, dtype=query.dtype, device=bias.device)
                bias = bias.masked_fill(~attn_mask, float("-inf"))  # type: ignore[operator]
            if bias is not None:
                bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
            grad = any(t.requires_grad for t in (query, key, value)) and torch.is_grad_enabled()
            out = _aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, grad, dropout_p, is_causal, scale=scale
            )
            return out[0]  # type: ignore[no-any-return]
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)  # fmt: skip

    return sdpa


@contextlib.contextmanager
def gpu_attention(counts: dict[str, int]) -> Iterator[None]:
    """Route `F.scaled_dot_product_attention` on CUDA tensors as a GPU would (transformers
    looks it up at each call); `counts` gets each kernel's calls."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _attention(original, counts)
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
