"""Benchmark: counting a 100k-row dataset's tokens for the plan's cost, and the cached re-plan.

Target (issue 12): counting 100,000 rows takes under 3 s on the 2-core CI-sized box, and a
second plan of the same file is served from the cache ($VERI_HOME/cache/tokens) without
importing tokenizers. The dataset is generated under /tmp from the bundled rows, each made
distinct by its row number (--vary number, the default: rows as long as the bundled ones),
or lengthened by 4-24 words from the bundled datasets (words) or of random letters
(random, which defeats the tokenizer's word cache); the tokenizer is the bundled tiny
model's (nothing is downloaded).

Every figure is a fresh process, as a user's `veri-tui plan` is one:
  count (cold): count_tokens in a new interpreter with an empty cache, tokenizers import
    included; its CPU time (tokenizers encodes on every core, so on an idle 2-core box the
    wall time is about half of it: under load the wall time says more about the load);
  plan (cold): `veri-tui plan --dataset FILE` with an empty cache;
  plan (cached): the same command again, the count read from the cache;
  plan (no dataset): `veri-tui plan`, for reference.

    python benchmarks/bench_token_count.py [--rows 100000] [--runs 5] [--method sft_text|dpo]
                                           [--vary number|words|random]

Results are copied into docs/planning.md (Cost) by hand, with the load average of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "assets" / "tiny-model"
SOURCES = {
    m: ROOT / "assets" / "data" / f"{n}.jsonl" for m, n in (("sft_text", "sft"), ("dpo", "dpo"))
}


def bundled_words() -> list[str]:
    """The words of the bundled datasets, most frequent first (the tiny tokenizer's domain)."""
    counts: dict[str, int] = {}
    for path in (ROOT / "assets" / "data").glob("*.jsonl"):
        for word in path.read_text().replace('"', " ").split():
            if word.isalpha():
                counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda w: -counts[w])


def make_dataset(path: Path, rows: int, method: str, vary: str, seed: int = 0) -> None:
    """`rows` rows cycled from the bundled dataset, each made distinct by its row number
    (`vary="number"`: rows as long as the bundled ones), or with 4-24 more words drawn from
    the bundled datasets' words, Zipf-weighted as text is (`"words"`), or made of random
    letters (`"random"`: the tokenizer's word cache never hits, the worst case for BPE)."""
    rng = random.Random(seed)
    base = [json.loads(x) for x in SOURCES[method].read_text().splitlines() if x.strip()]
    vocab = bundled_words()
    weights = [1 / (i + 1) for i in range(len(vocab))]
    letters = "abcdefghijklmnopqrstuvwxyz"

    def more(i: int) -> str:
        n = rng.randint(4, 24)
        if vary == "random":
            words = ("".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(n))
            return f" (row {i}) " + " ".join(words)
        if vary == "words":
            return f" (row {i}) " + " ".join(rng.choices(vocab, weights, k=n))
        return f" (row {i})"

    with path.open("w") as fh:
        for i in range(rows):
            row = dict(base[i % len(base)])
            key = "prompt" if method == "dpo" else "text"
            row[key] = row[key] + more(i)
            fh.write(json.dumps(row) + "\n")


COUNT = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from veri_tui.plan.tokens import count_tokens
c = count_tokens(sys.argv[1], sys.argv[2], sys.argv[3])
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
tokens = sum(sum(e[:-1]) * e[-1] for e in c.lengths)
print(json.dumps([dt, cpu, c.rows, tokens, c.cached]))
"""

PLAN = """
import contextlib, io, json, sys
from veri_tui.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    assert main(['plan', *sys.argv[1:], '--json']) == 0
cost = json.loads(out.getvalue())['cost']
print(json.dumps([cost.get('dataset_tokens'), 'tokenizers' in sys.modules]))
"""


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - t0, proc.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--method", choices=sorted(SOURCES), default="sft_text")
    how = "how rows differ: their number, + bundled words, + random words"
    ap.add_argument("--vary", choices=("number", "words", "random"), default="number", help=how)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-tokens-"))
    data = work / "data.jsonl"
    make_dataset(data, args.rows, args.method, args.vary)
    py = sys.executable
    size = data.stat().st_size
    print(f"dataset: {data} ({args.rows:,} rows, {size / 1e6:.1f} MB, {args.method}, "
          f"vary={args.vary})")  # fmt: skip
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at start")  # fmt: skip
    counts, cpus, count_walls, cold_plans, warm_plans, bare_plans = [], [], [], [], [], []
    plan_args = ["--dataset", str(data), "--method", args.method]
    for run in range(args.runs):
        home = work / f"home-{run}"
        env = {**os.environ, "VERI_HOME": str(home)}
        wall, line = timed([py, "-c", COUNT, str(data), str(TINY), args.method], env)
        dt, cpu, rows, tokens, cached = json.loads(line)
        assert rows == args.rows and not cached
        counts.append(dt)
        cpus.append(cpu)
        count_walls.append(wall)
        cold_home = {**os.environ, "VERI_HOME": str(work / f"cold-{run}")}
        wall, line = timed([py, "-c", PLAN, *plan_args], cold_home)
        cold_plans.append(wall)
        wall, line = timed([py, "-c", PLAN, *plan_args], cold_home)
        cached_tokens, imported = json.loads(line)
        assert cached_tokens == tokens and not imported, "the cached plan imported tokenizers"
        warm_plans.append(wall)
        wall, _ = timed([py, "-c", PLAN], env)
        bare_plans.append(wall)

    def row(label: str, xs: list[float]) -> None:
        print(f"{label:44s} median {statistics.median(xs) * 1e3:9.1f} ms  "
              f"(min {min(xs) * 1e3:.1f}, n={len(xs)})")  # fmt: skip

    print(f"tokens: {tokens:,} ({tokens / args.rows:.1f} per row)")
    row("count_tokens, cold (in a fresh process)", counts)
    row("  its CPU time (all threads; 2 cores share it)", cpus)
    row("  that process's wall time", count_walls)
    row("veri-tui plan --dataset, cold cache", cold_plans)
    row("veri-tui plan --dataset, cached (no tokenizers)", warm_plans)
    row("veri-tui plan, no dataset", bare_plans)
    print(f"target: count under 3 s: {'met' if statistics.median(counts) < 3 else 'NOT met'}; "
          f"load average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip


if __name__ == "__main__":
    main()
