"""Trainer step time vs a minimal plain-torch loop on the same model and batch (one process).

    python benchmarks/bench_trainer_overhead.py [--device cpu|cuda] [--steps 20] [--seq 128]

Both loops train the same randomly initialised Qwen3-shaped model (built from a config,
saved once, loaded twice) on the same global batch, with AdamW, clipping and gradient
checkpointing. The trainer side is the trainer's own step (`veri_tui.trainer.step.Stepper`: batch
slicing, collation, the global token-count all-reduce, the loss all-reduce, clipping); the
plain side is forward / cross-entropy / backward / clip / step. Steps alternate between the
two (order alternating) so drift in machine speed hits both alike; the headline figure is
the median of the per-step veri_tui/trainer/plain ratios.
Target: overhead under 5%. Results go into docs/trainer.md by hand.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from veri_tui.jobfolder.supervise.progress import Progress  # noqa: E402
from veri_tui.trainer import data  # noqa: E402
from veri_tui.trainer.config import TrainConfig  # noqa: E402
from veri_tui.trainer.measure import StateMeter  # noqa: E402
from veri_tui.trainer.model import build_policy, load_tokenizer  # noqa: E402
from veri_tui.trainer.parallelize import init_runtime, wrap_policy  # noqa: E402
from veri_tui.trainer.report import RankContext  # noqa: E402
from veri_tui.trainer.step import Stepper  # noqa: E402


def make_model(folder: Path, hidden: int, layers: int, seq: int) -> None:
    """A random Qwen3 with the bundled tokenizer, saved as a model directory."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    tok = load_tokenizer(REPO / "assets" / "tiny-model")
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=448, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64), num_key_value_heads=max(1, hidden // 128),
        head_dim=64, max_position_embeddings=max(seq, 512), tie_word_embeddings=False,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)


def make_rows(tok, n: int, seq: int) -> list[data.Example]:
    """n text rows truncated to exactly `seq` tokens (no padding: both loops see the same)."""
    text = " ".join(f"The cat number {i} lives in the barn and is red." for i in range(seq))
    ids = tok(text)["input_ids"][:seq]
    return [data.Example(list(ids), list(ids)) for _ in range(n)]


def plain_step(model, opt, batch, device) -> None:
    """The minimal loop: what any hand-written single-GPU script does per step."""
    ids = batch["input_ids"].to(device)
    labels = batch["labels"].to(device)
    logits = model(input_ids=ids, attention_mask=batch["attention_mask"].to(device)).logits
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> None:
    """Run both loops and print median step times and the overhead."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=20)
    # Small defaults: bf16 matmuls on a 2-core CPU run at a few GFLOP/s.
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--mbs", type=int, default=4)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    make_model(tmp / "model", args.hidden, args.layers, args.seq)
    cfg = TrainConfig(
        job_dir=tmp, method="sft_text", model_path=str(tmp / "model"), dataset=tmp / "unused",
        output_dir=tmp / "out", device=args.device, micro_batch_size=args.mbs,
        learning_rate=1e-4, max_length=args.seq,
    )  # fmt: skip
    rt = init_runtime(cfg)
    tok = load_tokenizer(tmp / "model")
    rows = make_rows(tok, args.mbs * (args.steps + 2), args.seq)
    model = wrap_policy(build_policy(cfg, tmp / "model"), cfg, rt)
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-4)
    meter = StateMeter(RankContext(0, 0, 0, 1, tmp), step=-1)
    stepper = Stepper(cfg, rt, model, None, opt, tok.pad_token_id, rows, meter)
    stepper.progress = Progress(tmp, 0)  # the hang watchdog's progress line, as in a run
    plain = wrap_policy(build_policy(cfg, tmp / "model"), cfg, rt)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-4)
    batch = data.collate(rows[: args.mbs], tok.pad_token_id)
    t_trainer, t_plain = [], []
    for step in range(args.steps + 2):
        # Alternate which loop goes first, so cache and clock effects of order cancel out.
        order = ("trainer", "plain") if step % 2 == 0 else ("plain", "trainer")
        took = {}
        for which in order:
            t0 = time.perf_counter()
            if which == "trainer":
                stepper.step(step)  # .tolist()/float() inside already synchronise
            else:
                plain_step(plain, plain_opt, batch, rt.device)
            took[which] = time.perf_counter() - t0
        if step >= 2:  # the first steps allocate optimizer states and warm caches
            t_trainer.append(took["trainer"])
            t_plain.append(took["plain"])
    a, b = statistics.median(t_trainer), statistics.median(t_plain)
    pairs = statistics.median(x / y for x, y in zip(t_trainer, t_plain, strict=True))
    tokens = args.mbs * args.seq
    n = sum(q.numel() for q in model.parameters())
    threads = torch.get_num_threads()
    print(f"device={rt.device.type} threads={threads} params={n} tokens/step={tokens}")
    print(f"trainer step: {a * 1000:.1f} ms (median of {len(t_trainer)})")
    print(f"plain step:   {b * 1000:.1f} ms")
    # Paired ratios are the robust figure when other work shares the cores.
    print(f"overhead:     {100 * (pairs - 1):+.1f}% (median of paired step ratios; target < 5%)")
    print(f"              {100 * (a / b - 1):+.1f}% (ratio of the two medians)")
    # The progress marks inside the trainer step, timed alone (too small for the ratios).
    marks = 2 + 2 * cfg.gradient_accumulation_steps  # data, optimizer, forward+backward each
    t0 = time.perf_counter()
    for _ in range(20_000):
        stepper.progress.mark("forward")
    per_mark = (time.perf_counter() - t0) / 20_000
    share = 100 * marks * per_mark / a
    print(f"progress:     {marks} marks/step x {per_mark * 1e6:.1f} us = {share:.4f}% of the step")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
