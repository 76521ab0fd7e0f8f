"""What a model step holds in memory, measured tensor by tensor on CPU (or fake tensors):
test support for tests/plan/test_saved_tensors.py and benchmarks/bench_activations.py.

Two instruments, both counting storages (tensors that share a storage count once):

- `saved_by_autograd`: the bytes autograd packs for backward during a forward, seen through
  `torch.autograd.graph.saved_tensors_hooks`, per decoder layer and for the rest (the root);
  parameters excluded. This is exactly what a model without checkpointing keeps.
- `Census` (veri_tui/trainer/census.py, shared with the canary): a TorchDispatchMode that registers
  every storage an op creates and notices when it is freed (a weak reference), so it knows
  the bytes alive after each op. It sees what a checkpointed model keeps outside autograd's
  packing (the checkpoint's inputs, a selective policy's cached outputs), the recomputation
  in backward and the loss's buffers, and gives the peak. Parameters, their gradients and
  the batch are left out: states are not activations. Temporaries inside one kernel are not
  seen (they never reach Python).

Shapes, not values, decide these bytes, so both also run under FakeTensorMode (no data).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from veri_tui.trainer.census import Census, _key


def saved_by_autograd(
    model: torch.nn.Module, layers: list[torch.nn.Module], run: Callable[[], Any]
) -> dict[str, int]:
    """Bytes packed for backward while `run()` does a forward: {"layer<i>": ..., "root": ...}
    (tensors of one storage counted once, where they are first packed)."""
    params = {_key(p) for p in model.parameters()}
    seen: set[int] = set()
    where = ["root"]
    out: collections.Counter[str] = collections.Counter()

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = _key(t)
        if key not in params and key not in seen:
            seen.add(key)
            out[where[0]] += t.untyped_storage().nbytes()
        return t

    handles = []
    for i, layer in enumerate(layers):
        handles.append(
            layer.register_forward_pre_hook(lambda *_a, i=i: where.__setitem__(0, f"layer{i}"))
        )
        handles.append(layer.register_forward_hook(lambda *_a: where.__setitem__(0, "root")))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for h in handles:
            h.remove()
    return dict(out)


@contextlib.contextmanager
def _as_real_when_fake(fake: bool) -> Iterator[None]:
    """What fake tensors cannot decide as the real run does, decided as it does:
    transformers cannot read the position ids to see that one full-length sample is no
    packed sequence (and would build a mask the real run does not): not packed; and peft's
    `module.to(its own device)` would swap fake parameters, which torch refuses: a no-op,
    as it is for real ones (build_model sets the adapters' dtype itself)."""
    if not fake:
        yield
        return
    import transformers.masking_utils as masks

    real = masks.find_packed_sequence_indices, torch.nn.Module.to
    masks.find_packed_sequence_indices = lambda position_ids: None
    torch.nn.Module.to = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        masks.find_packed_sequence_indices, torch.nn.Module.to = real  # type: ignore[method-assign]


def build_model(
    config: dict[str, Any], *, mode: str, lora_rank: int = 0, autocast: bool = False
) -> torch.nn.Module:
    """A transformers model from config.json values, as the trainer builds it: bf16 (fp32
    master weights under autocast), checkpointed as `mode`, LoRA on the trainer's targets
    (fp32 adapters under autocast)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from veri_tui.trainer import checkpointing
    from veri_tui.trainer.model import lora_targets

    cfg = AutoConfig.for_model(**config)
    dtype = torch.float32 if autocast and not lora_rank else torch.bfloat16
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    model.config.use_cache = False
    checkpointing.apply(model, mode)
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        targets, _ = lora_targets(model)
        lora = LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                          target_modules=targets, task_type="CAUSAL_LM")  # fmt: skip
        model = get_peft_model(model, lora, autocast_adapter_dtype=False)
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.float32 if autocast else torch.bfloat16)
    return model.train()


def measure_step(
    config: dict[str, Any],
    *,
    mode: str,
    tokens: int,
    lora_rank: int = 0,
    autocast: bool = False,
    fake: bool = False,
) -> dict[str, int]:
    """One sample of `tokens` through forward, the bundled trainer's loss and backward, as
    veri_tui/trainer/loop.py runs it (the forward and loss under autocast for fp32 weights, backward
    outside): `kept`, the bytes alive once the loss is computed, and `peak`, the most alive
    after any op; the batch counted, parameters and their gradients not."""
    from veri_tui.trainer.losses import token_logps

    modes = FakeTensorMode() if fake else contextlib.nullcontext()
    with modes, _as_real_when_fake(fake):
        torch.manual_seed(0)
        model = build_model(config, mode=mode, lora_rank=lora_rank, autocast=autocast)
        params = list(model.parameters())
        census = Census(exclude=params)
        vocab = config["vocab_size"]
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with census:
            ids = torch.randint(0, vocab, (1, tokens))
            mask, labels = torch.ones_like(ids), ids.clone()
            with cast:
                # Fake tensors carry no values: the all-ones mask, which the real run reads
                # and drops, is not passed (it is still allocated, as the trainer's is).
                out = model(input_ids=ids, attention_mask=None if fake else mask)
                loss = -token_logps(out.logits, labels).sum()
            del out
            census.mark("kept")
            loss.backward()
        return {"kept": census.marks["kept"], "peak": census.peak([p.grad for p in params])}


def _reference_loss(kind: str, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss of `kind` as the code it stands for computes it (veri_tui/plan/losses.py
    LOSSES); `logits` (1, T, V) bf16."""
    import torch.nn.functional as F

    from veri_tui.trainer.losses import token_logps

    if kind == "chunked":
        return -token_logps(logits, labels).sum()
    if kind in ("ce_bf16", "ce_fp32"):  # torchtitan's loss_fn, on bf16 or `pred.float()`
        pred = logits.float() if kind == "ce_fp32" else logits
        return F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1))
    # A transformers causal LM's shifted loss (Qwen's modeling_qwen.py: shift_logits =
    # lm_logits[..., :-1, :].contiguous(), then CrossEntropyLoss on its view); CUDA autocast
    # runs cross_entropy in fp32 (PyTorch's autocast op list): written out as its cast.
    shift = logits[..., :-1, :].contiguous()
    flat = shift.view(-1, shift.size(-1))
    flat = flat.float() if kind == "ce_autocast_shifted" else flat
    return F.cross_entropy(flat, labels[..., 1:].reshape(-1))


def measure_loss(kind: str, *, tokens: int, vocab: int, hidden: int = 64) -> dict[str, int]:
    """The bytes a loss holds beyond its logits' producer (a bf16 head over a hidden state):
    `forward`, the most alive up to the loss; `kept`, once the logits are dropped as the
    trainer drops them (its caller's reference gone); `backward`, the most alive after."""
    torch.manual_seed(0)
    head = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(1, tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (1, tokens))
    census = Census(exclude=[head, x, labels])
    with census:
        logits = x @ head.t()
        loss = _reference_loss(kind, logits, labels)
        forward = max(sum(census.sizes[s] for s in serials) for serials in census.timeline)
        del logits
        census.mark("kept")
        start = len(census.timeline)
        loss.backward()
    grads = [head.grad, x.grad]
    census._sweep()
    drop = {serial for k, (_, _, serial) in census.live.items() if k in {_key(g) for g in grads}}
    backward = max(
        sum(census.sizes[s] for s in serials if s not in drop)
        for serials in census.timeline[start:]
    )
    return {"forward": forward, "kept": census.marks["kept"], "backward": backward}
