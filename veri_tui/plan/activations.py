"""The activation model: what one micro-batch keeps for backward, per GPU, as the bundled
trainer runs it, for one layout (layout.py) and the knobs that change it: the checkpointing
mode, LoRA's rank and autocast. peak.py adds the states and the units in flight to it.

Counted from what the code holds, per token, for a decoder layer in transformers (SDPA
attention, HF's RMSNorm, SwiGLU or a mixture of experts), each term measured against what a
real model keeps (tests/plan/test_saved_tensors.py; the derivation is in docs/planning.md):

- an RMSNorm keeps its input in fp32 (4h), its 1/rms (4) and, when its weight trains, the
  normalised input in the compute dtype (2h; 4h under autocast, which leaves it fp32);
- a linear keeps its input when its weight trains: one copy shared by q, k and v (and by
  gate and up); autocast casts it for each linear; a LoRA adapter keeps its rank-r middle;
- attention keeps rotated q, k, v, its output and the fp32 log-sum-exp (Qwen3's per-head
  q/k norms add their inputs; DeepSeek's latent attention its two normed latents). With
  an attention mask (packed rows: `mask_length`, the row's tokens) SDPA cannot run flash:
  transformers repeats k and v to every query head (`repeat_kv`: no grouped-query SDPA on
  CUDA with a mask) and the memory-efficient kernel keeps those copies and its additive
  bias, the boolean mask made bf16 inside each layer's SDPA call (2 x row bytes per token);
- a dense MLP keeps gate, silu(gate) and up, and their product when down trains (8I or 6I);
  a mixture-of-experts block its routed copies, router probabilities and shared experts
  (`mlp_saved`, measured by tests/trainer/test_moe_training.py).

Checkpointing ("none" | "selective" | "full", veri_tui/trainer/checkpointing.py) decides what a
layer keeps between its forward and its backward: everything; its input plus the outputs of the
attention kernel and of every other mm (torchtitan's op policy); or its input only. A
checkpointed layer is recomputed in backward, one at a time. The loss (losses.py) holds the
logits beside one fp32 chunk.

Three moments compete for the peak (tests/plan/test_saved_tensors.py finds it op by op):
- the end of the forward: everything kept, the logits, the loss's fp32 chunk, and under
  autocast its cast cache (a bf16 copy of every fp32 weight, alive until autocast exits);
- the start of backward: everything kept, the logits and their gradient, the chunk;
- the last layer's backward when checkpointed: the layers' keeps, that layer recomputed
  (its whole saved set), the gradient of its input and its MLP's gradients (2h + 4I).
Logits and the root are freed before the layers' backward; the batch and rotary tables are
alive throughout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from veri_tui.plan.layers import LayerKind
from veri_tui.plan.layout import Layout
from veri_tui.plan.losses import LOSS_KEPT_PER_TOKEN, LOSSES, loss_chunk_bytes

if TYPE_CHECKING:
    from veri_tui.jobfolder.knobs.fields import Checkpointing
    from veri_tui.plan.model_info import ModelInfo

POSITION_IDS = 8  # int64 per token, kept with a checkpointed layer's inputs
# The micro-batch on the GPU: input_ids, attention_mask and labels, int64 each.
BATCH_PER_TOKEN = 3 * 8


class ActivationTerms(NamedTuple):
    """The activation bytes of one micro-batch, by term, and its peak (the larger moment)."""

    layers: int  # what every layer keeps until its backward, the batch, the rotary tables
    root: int  # the final norm's and the head's
    logits: int  # the logits kept, their gradient, the loss's chunk and per-token state
    recompute: int  # a checkpointed layer recomputed in backward: gradients, recast weights
    casts: int  # autocast's bf16 weight copies (fp32 weights at stage 0)
    kept: int  # alive once the forward and the loss are done (autocast's cache cleared)
    peak: int
    phase: str  # "forward" (its end), "loss" (the loss's backward) or "layer" (the last
    # layer's backward, recomputed when checkpointed)


class ActivationModel:
    """The activations of one model under one checkpointing mode, LoRA rank and autocast:
    per layer kind (`kinds`: dense, MoE) what a layer saves, keeps, holds again when
    recomputed and casts; per token what the root and the whole step keep; and, for a
    micro-batch of `tokens`, the terms and their peak (`terms`)."""

    def __init__(
        self,
        layout: Layout,
        checkpointing: Checkpointing,
        *,
        lora_rank: int = 0,
        autocast: bool = False,
        mask_length: int = 0,
    ) -> None:
        self.layout = layout
        self.checkpointing: Checkpointing = checkpointing
        self.lora_rank = lora_rank
        self.autocast = autocast
        #: The tokens of a row when attention gets a mask (packed rows), else 0.
        self.mask_length = mask_length
        self.frozen = lora_rank > 0  # the base is frozen, in bf16; the adapters train
        self.cast = autocast and not self.frozen  # fp32 weights computing under autocast
        #: Bytes per hidden unit of the residual stream between layers (fp32 under autocast;
        #: LoRA's base is bf16).
        self.stream = 4 if self.cast else 2
        # Per layer kind, in the order the layers run; none of it depends on the tokens.
        self.kinds = tuple(LayerKind(self, moe, n) for moe, n in layout.kinds)

    @classmethod
    def of(
        cls,
        info: ModelInfo,
        checkpointing: Checkpointing,
        *,
        lora_rank: int = 0,
        autocast: bool = False,
        mask_length: int = 0,
    ) -> ActivationModel:
        return cls(Layout.of(info), checkpointing, lora_rank=lora_rank, autocast=autocast,
                   mask_length=mask_length)  # fmt: skip

    @property
    def checkpointed(self) -> bool:
        return self.checkpointing != "none"

    @property
    def root(self) -> int:
        """Bytes per token the final norm and the head keep (the head's input when it trains)."""
        if self.frozen:
            return 4 * self.layout.h + 4
        return 4 * self.layout.h + 4 + self.stream * self.layout.h + 2 * self.layout.h

    @property
    def shared(self) -> int:
        """Bytes per token alive through the whole step: the micro-batch (the embedding keeps
        the ids) and the rotary cos/sin tables every layer uses (fp32 under autocast)."""
        return BATCH_PER_TOKEN + 2 * self.layout.head_dim * self.stream

    @property
    def head_cast(self) -> int:
        """Autocast's bf16 copy of an fp32 head (a LoRA job's head is bf16 and frozen)."""
        return 2 * self.layout.vocab * self.layout.h if self.cast else 0

    @property
    def recompute_flops(self) -> int:
        """Matmul FLOPs per token the selective policy recomputes in backward, every layer's."""
        return sum(k.count * k.recompute_flops for k in self.kinds)

    def _dropout_masks(self) -> int:
        """Bytes per token of one layer's LoRA dropout masks: a bool per input feature of
        every adapter (other trainers' runs; the bundled trainer's dropout is 0)."""
        return sum(i for i, _, adapted in self.layout.linears() if adapted)

    def _layers(self, tokens: int, lora_dropout: bool) -> int:
        """What every layer keeps until its backward, the batch and the rotary tables."""
        per_token = sum(k.count * k.kept for k in self.kinds) + self.shared
        if self.checkpointed:
            per_token += POSITION_IDS
        else:  # layer 0's own difference (its first norm under LoRA)
            first = self.kinds[0]
            per_token += first.first_saved - first.kept
            if lora_dropout and self.lora_rank:
                per_token += self._dropout_masks() * self.layout.layers
        return tokens * per_token

    def _recompute(self, tokens: int, lora_dropout: bool) -> int:
        """The last layer of a kind recomputed in its backward, beyond what it keeps (the
        larger kind's): by then the layers after it have freed what they kept."""
        if not self.checkpointed:
            return 0
        after = sum(k.count * k.kept for k in self.kinds)
        out = 0
        for k in self.kinds:
            after -= k.count * k.kept
            out = max(out, tokens * k.recomputed + k.casts - tokens * after)
        if lora_dropout and self.lora_rank:  # the recomputed layer's masks
            out += tokens * self._dropout_masks()
        return out

    def terms(
        self, tokens: int, loss: str = "chunked", lora_dropout: bool = False
    ) -> ActivationTerms:
        """The activation terms for `tokens` tokens in one micro-batch (exact integers).

        `loss` and `lora_dropout` (each adapter's dropout keeps its bool mask) describe other
        trainers' published runs; the bundled trainer's are the defaults."""
        vocab = self.layout.vocab
        layers = self._layers(tokens, lora_dropout)
        root = tokens * self.root
        lm = LOSSES[loss]
        chunk = loss_chunk_bytes(vocab, tokens) if lm.chunked else 0
        extra = LOSS_KEPT_PER_TOKEN if lm.chunked else 0
        logits = tokens * (lm.backward * vocab + extra) + chunk
        casts = sum(k.count * k.casts for k in self.kinds) + self.head_cast
        recompute = self._recompute(tokens, lora_dropout)
        # The matmuls keep their cast weights for backward: every one without checkpointing,
        # else only the head's (outside the checkpointed layers); a recomputed layer recasts.
        kept_casts = self.head_cast if self.checkpointed else casts
        at_forward = layers + root + tokens * (lm.forward * vocab + extra) + chunk + casts
        at_loss = layers + root + logits + kept_casts
        # The head's cast is freed by the layers' backward.
        at_layer = layers + recompute if self.checkpointed else 0
        phases = {"forward": at_forward, "loss": at_loss, "layer": at_layer}
        phase = max(phases, key=phases.__getitem__)
        kept = layers + root + tokens * (lm.kept * vocab + extra) + kept_casts
        return ActivationTerms(layers, root, logits, recompute, casts, kept, phases[phase], phase)

    def largest_micro_batch(self, seq: int, available: float) -> int:
        """The largest mbs whose activations fit `available` (0: not even one sample)."""

        def fits(mbs: int) -> bool:
            return self.terms(mbs * seq).peak <= available

        lo, hi = 0, 1
        while fits(hi) and hi < 2**20:
            lo, hi = hi, hi * 2
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo


def sequence_length(method: str, max_seq_length: int, max_length: int) -> int:
    """Tokens per sample in one forward: DPO runs chosen and rejected together."""
    return 2 * max_length if method == "dpo" else max_seq_length
