"""Peak memory of the loss over the logits: the trainer's chunked token_logps vs log_softmax.

    python benchmarks/bench_loss_memory.py [--vocab 151936] [--tokens 2048] [--reps 2]

Each variant runs in a fresh process: random bf16 logits (a leaf that requires grad, as the
lm_head output would), one forward and backward of the summed label log-probabilities, and
the peak RSS (VmHWM from /proc) above the RSS once the logits exist. Variants:

- `fp32_log_softmax`: log_softmax(logits.float()) then gather (the DPO code before)
- `fp32_cross_entropy`: F.cross_entropy(logits.float(), reduction="sum") (the SFT code before)
- `bf16_cross_entropy`: F.cross_entropy on the bf16 logits (no upcast)
- `chunked`: veri_tui.trainer.losses.token_logps (what the trainer runs now)

Every variant also holds the bf16 gradient of the logits (2 bytes per vocab entry per token,
the leaf's .grad); the figures are printed per token and per vocab entry (bytes / (V x T)).
Results go into docs/trainer.md by hand.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("fp32_log_softmax", "fp32_cross_entropy", "bf16_cross_entropy", "chunked")


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def child(variant: str, vocab: int, tokens: int) -> dict:
    """One forward + backward of `variant`; returns the peak RSS above the logits."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO))
    from veri_tui.trainer.data import IGNORE
    from veri_tui.trainer.losses import token_logps

    torch.manual_seed(0)
    logits = torch.randn(1, tokens, vocab, dtype=torch.bfloat16).requires_grad_()
    labels = torch.randint(0, vocab, (1, tokens))
    labels[0, : tokens // 8] = IGNORE  # a prompt: no loss there
    flat_logits, flat_labels = logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()
    base = _status("VmRSS")
    t0 = time.perf_counter()
    if variant == "fp32_log_softmax":
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        picked = torch.gather(logp, 2, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        total = (picked * (labels[:, 1:] != IGNORE)).sum()
    elif variant.endswith("cross_entropy"):
        x = flat_logits.float() if variant.startswith("fp32") else flat_logits
        total = -F.cross_entropy(x, flat_labels, ignore_index=IGNORE, reduction="sum")
    else:
        total = token_logps(logits, labels).sum()
    total.backward()
    seconds = time.perf_counter() - t0
    peak = _status("VmHWM") - base
    return {"variant": variant, "peak_bytes": peak, "seconds": round(seconds, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", choices=VARIANTS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.vocab, args.tokens)))
        return
    vt = args.vocab * args.tokens
    print(f"vocab {args.vocab}, tokens {args.tokens}: bf16 logits {2 * vt / 2**20:.0f} MiB")
    for variant in VARIANTS:
        peaks, times = [], []
        for _ in range(args.reps):
            cmd = [sys.executable, __file__, "--child", variant]
            cmd += ["--vocab", str(args.vocab), "--tokens", str(args.tokens)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            peaks.append(row["peak_bytes"])
            times.append(row["seconds"])
        peak = min(peaks)
        print(
            f"{variant:20s} peak above logits {peak / 2**20:8.0f} MiB "
            f"= {peak / vt:5.2f} bytes/(V x token)   {min(times):.2f} s"
        )


if __name__ == "__main__":
    main()
