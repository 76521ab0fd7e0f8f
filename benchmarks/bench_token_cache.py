"""The token cache against tokenizing on every rank: time and resident memory per rank.

    python benchmarks/bench_token_cache.py [--rows 20000] [--nproc 2] [--dataset FILE]

Without --dataset it writes a synthetic sft_text set of --rows rows (the bundled text and
messages rows, numbered so no two are alike) and runs itself under torchrun, --nproc CPU
ranks on gloo, the bundled tiny model's tokenizer. Each rank measures, in order: what the
trainer did before (`data.load_dataset` on every rank, the whole file as Python lists),
then `prepare_dataset` in a fresh job folder (the build, split over the ranks), then again
(the reuse: key, manifest hashes, layout check), then one pass reading (and dropping) every
row it would read in an epoch. Memory is VmRSS above the rank's RSS before the step, with
the step's result still held (the old way's lists, the cache's mapping). Rank 0 prints the
table; results go into docs/trainer.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rss_mb() -> float:
    """This process's VmRSS in MB (10^6 bytes)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        line = next(ln for ln in fh if ln.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024 / 1e6


def write_dataset(path: Path, rows: int) -> None:
    """`rows` sft_text rows, each bundled row again with its number, so none repeats."""
    data = REPO / "assets" / "data"
    texts = [json.loads(ln) for ln in (data / "sft.jsonl").read_text().splitlines()]
    chats = [json.loads(ln) for ln in (data / "sft_messages.jsonl").read_text().splitlines()]
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(rows):
            if i % 4 == 3:
                row = json.loads(json.dumps(chats[i % len(chats)]))
                row["messages"][-1]["content"] += f" (answer {i})"
            else:
                row = {"text": f"{texts[i % len(texts)]['text']} Row {i}."}
            fh.write(json.dumps(row) + "\n")


def _step(name: str, fn, out: dict) -> object:
    before, t0 = rss_mb(), time.perf_counter()
    result = fn()
    out[name] = (time.perf_counter() - t0, rss_mb() - before)
    return result


def rank_main(dataset: Path, root: Path) -> None:
    """One rank's measurements (under torchrun)."""
    import torch.distributed as dist

    from veri_tui.trainer import data
    from veri_tui.trainer.config import TrainConfig
    from veri_tui.trainer.dataprep import prepare_dataset
    from veri_tui.trainer.model import load_tokenizer
    from veri_tui.trainer.report import RankContext, RankLog

    dist.init_process_group("gloo")
    tiny = REPO / "assets" / "tiny-model"
    tok = load_tokenizer(tiny)
    ctx = RankContext.from_env(root / "job")
    cfg = TrainConfig(ctx.job_dir, "sft_text", str(tiny), dataset=dataset, output_dir=root)
    log, out = RankLog(ctx), {}
    old = _step("every rank tokenizes (before)", lambda: data.load_dataset(
        dataset, "sft_text", tok, cfg.max_length), out)  # fmt: skip
    del old
    dist.barrier()
    _step("token cache: build", lambda: prepare_dataset(cfg, ctx, tok, tiny, log), out)
    dist.barrier()
    cache = _step("token cache: reuse", lambda: prepare_dataset(cfg, ctx, tok, tiny, log), out)
    mine = range(ctx.rank, len(cache), ctx.world_size)  # an epoch's share of the rows
    # Read, not kept: what a run holds is one micro-batch at a time.
    _step("read this rank's rows", lambda: sum(len(cache[i].input_ids) for i in mine), out)
    got: list = [None] * ctx.world_size
    dist.all_gather_object(got, out)
    if ctx.rank == 0:
        print(f"{len(cache)} rows, {cache.meta['tokens']} tokens, {ctx.world_size} ranks")
        print("| step | seconds (rank 0 / 1 ...) | RSS rise MB (rank 0 / 1 ...) |\n|---|---|---|")
        for name in out:
            secs = " / ".join(f"{g[name][0]:.2f}" for g in got)
            mem = " / ".join(f"{g[name][1]:+.1f}" for g in got)
            print(f"| {name} | {secs} | {mem} |")
    log.close()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--dataset", type=Path)
    ap.add_argument("--rank-root", type=Path, help=argparse.SUPPRESS)  # the torchrun child
    args = ap.parse_args()
    if args.rank_root:
        rank_main(args.dataset, args.rank_root)
        return
    with tempfile.TemporaryDirectory(prefix="veri-bench-tokens-") as tmp:
        dataset = args.dataset or Path(tmp) / "rows.jsonl"
        if args.dataset is None:
            write_dataset(dataset, args.rows)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc)]
        cmd += [__file__, "--dataset", str(dataset), "--rank-root", tmp]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        subprocess.run(cmd, check=True, env=env, cwd=REPO)


if __name__ == "__main__":
    main()
