"""The plan against published, measured training runs; writes docs/accuracy.md.

    python benchmarks/estimate_accuracy.py [--out docs/accuracy.md]

Each run of benchmarks/published_runs.py is planned with `veri_tui.plan.plan(...)` on a
header-only checkpoint of its model's shape (nothing downloaded), for the catalog GPU, GPU
count, micro-batch, accumulation, sequence, checkpointing, precision and ZeRO stage it ran
with; its throughput with the planner's estimate_throughput as the run ran, where the source
states it (benchmarks/as_ran.py: a GPU it describes, selective checkpointing's recompute, the
nodes and network). The plan's tokens/s per GPU is set against the measured one (ratio =
plan / measured: above 1 the plan is optimistic), and its peak memory (the plan's peak per
GPU) against a stated peak; published fine-tuning peaks are set against the plan in
benchmarks/memory_accuracy.py (the Peak memory section). The fit searches the throughput constants
(veri_tui/plan/throughput.py: matmul efficiency per GPU architecture and the elementwise
bytes) that minimise the squared log ratios over the rows marked `fit`; every other row is
held out. The planner runs eager kernels' figures (the bundled trainer runs eager); compiled
rows are compared with the plan times COMPILE_SPEEDUP.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))  # support.synthetic: header-only checkpoints

import as_ran  # noqa: E402
import memory_accuracy  # noqa: E402
import memory_report  # noqa: E402
from accuracy_report import TARGET_TOKENS, render  # noqa: E402
from published_runs import (  # noqa: E402
    PUBLISHED_PARAMS,
    RUNS,
    SHAPES,
    Run,
    compile_speedup,
    mpt_tensors,
)

# torchtitan's Table 1 ran the same configuration with and without torch.compile.
COMPILE_SPEEDUP = compile_speedup()
OLD_CONSTANTS = (0.55, 0)  # before the fit: MAX_MFU 0.55 on every GPU, no elementwise term
# torchtitan's op-level selective policy is the bundled trainer's "selective".
CHECKPOINTING = {"full": "full", "none": "none", "selective-op": "selective"}
ARCH = {"A100-40GB": "ampere", "A100-80GB": "ampere", "H100-80GB": "hopper", "H200-141GB": "hopper"}


def checkpoints(root: Path) -> dict[str, Path]:
    """Header-only checkpoints of every shape (sparse files: kilobytes on disk)."""
    from support.synthetic import write_checkpoint

    out = {}
    for name, config in SHAPES.items():
        tensors = mpt_tensors(config) if config["model_type"] == "mpt" else None
        write_checkpoint(root / name, config, tensors=tensors)
        out[name] = root / name
    return out


def plan_run(run: Run, model: Path, *, selective: bool = False) -> dict[str, Any]:
    """The plan for this run's configuration (the public API, as a user would call it).

    The throughput rows plan torchtitan's selective runs as no checkpointing and correct
    that as ran (as_ran.py); `selective`: with the planner's own selective mode (for the
    peak memory, which the throughput corrections do not touch)."""
    from veri_tui.plan import plan

    mode = CHECKPOINTING[run.checkpointing] if selective else (
        "full" if run.checkpointing == "full" else "none"
    )  # fmt: skip
    rec = plan(
        model=str(model), gpu=run.gpu, gpu_count=run.gpu_count,
        micro_batch_size=run.micro_batch_size, gradient_accumulation_steps=run.grad_acc,
        max_seq_length=run.seq, activation_checkpointing=mode,
        precision=run.precision, zero_stage=run.zero_stage,
    )  # fmt: skip
    return rec.to_dict()


def _throughput(
    run: Run, info: Any, rec: dict[str, Any], *, corrected: bool = True,
    tflops: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The planner's throughput function on this run (re-evaluated while fitting): as it ran
    (benchmarks/as_ran.py; `tflops`: at that peak), or with `corrected=False` as planned
    before the corrections."""
    from veri_tui.plan.throughput import estimate_throughput

    rp = rec["resolved_parallelism"]
    with as_ran.tables_for(run) if corrected else contextlib.nullcontext():
        return estimate_throughput(
            info, method="sft_text", gpu_count=run.gpu_count, zero_stage=rp["zero_stage"],
            precision=run.precision, lora_rank=0, micro_batch_size=rp["micro_batch_size"],
            gradient_accumulation_steps=rp["gradient_accumulation_steps"],
            max_seq_length=run.seq, max_length=run.seq,
            **as_ran.throughput_args(run, info, as_ran=corrected, tflops=tflops),
        )  # fmt: skip


def evaluate(dirs: dict[str, Path]) -> list[dict[str, Any]]:
    """One row per run: configuration, measured and planned figures, ratios."""
    from veri_tui.plan import read_model_info
    from veri_tui.plan.throughput import flops_per_token

    rows = []
    for run in RUNS:
        info = read_model_info(str(dirs[run.shape]))
        rec = plan_run(run, dirs[run.shape])
        speedup = COMPILE_SPEEDUP if run.compiled else 1.0
        planned = _throughput(run, info, rec)["tokens_per_s"] / run.gpu_count
        expected = planned * speedup
        before = _throughput(run, info, rec, corrected=False)["tokens_per_s"] / run.gpu_count
        peak = plan_run(run, dirs[run.shape], selective=True)["activations"]["peak"]["peak_bytes"]
        model_flops = flops_per_token(info, run.seq, lora=False, gc=False, dpo=False)["total"]
        dense = as_ran.gpu_for(run).bf16_dense_tflops * 1e12
        with constants(*OLD_CONSTANTS):
            old = _throughput(run, info, rec)["tokens_per_s"] / run.gpu_count
        rows.append({
            "run": run, "info": info, "record": rec, "parameters": info.parameter_count,
            "old_ratio": old * speedup / run.tokens_per_s_per_gpu,
            "uncorrected_ratio": before * speedup / run.tokens_per_s_per_gpu,
            "corrections": as_ran.corrections_for(run),
            "bracket": [  # a described GPU's ratio at each end of its source's peak bracket
                _throughput(run, info, rec, tflops=t)["tokens_per_s"] * speedup
                / run.gpu_count / run.tokens_per_s_per_gpu
                for t in (as_ran.DESCRIBED[run.hardware].bracket if run.hardware else ())
            ],
            "planned_tokens_per_s": planned, "expected_tokens_per_s": expected,
            "tokens_ratio": expected / run.tokens_per_s_per_gpu,
            "measured_mfu": run.tokens_per_s_per_gpu * model_flops / dense,
            "planned_mfu": planned * model_flops / dense, "planned_peak_bytes": peak,
            "memory_ratio": peak / run.peak_memory_bytes if run.peak_memory_bytes else None,
        })  # fmt: skip
    return rows


@contextlib.contextmanager
def constants(efficiency: float, nbytes: int) -> Iterator[None]:
    """The planner's throughput constants set to these (one efficiency for every GPU) for
    the duration; the committed values are restored after."""
    from veri_tui.plan import throughput

    saved = (dict(throughput.MATMUL_EFFICIENCY), throughput.ELEMENTWISE_BYTES)
    throughput.MATMUL_EFFICIENCY = dict.fromkeys(ARCH, efficiency)
    throughput.ELEMENTWISE_BYTES = nbytes
    try:
        yield
    finally:
        throughput.MATMUL_EFFICIENCY, throughput.ELEMENTWISE_BYTES = saved


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Least squares on log(plan / measured) over the `fit` rows: for each elementwise-bytes
    value on a grid, the best efficiency per architecture (independent given the bytes)."""
    chosen = [r for r in rows if r["run"].fit]
    best: dict[str, Any] | None = None
    for nbytes in range(0, 301, 5):
        effs, total = {}, 0.0
        for arch in sorted({ARCH[r["run"].gpu] for r in chosen}):
            mine = [r for r in chosen if ARCH[r["run"].gpu] == arch]
            scored = []
            for e100 in range(30, 96):
                with constants(e100 / 100, nbytes):
                    scored.append((sum(_log_ratio(r) ** 2 for r in mine), e100 / 100))
            sq, effs[arch] = min(scored)
            total += sq
        if best is None or total < best["sum_sq"]:
            best = {"elementwise_bytes": nbytes, "efficiency": effs, "sum_sq": total}
    assert best is not None
    best["rows"] = [r["run"].id for r in chosen]
    best["rms"] = math.sqrt(best["sum_sq"] / len(chosen))
    return best


def _log_ratio(row: dict[str, Any]) -> float:
    tps = _throughput(row["run"], row["info"], row["record"])["tokens_per_s"]
    return math.log(tps / row["run"].gpu_count / row["run"].tokens_per_s_per_gpu)


def main(argv: list[str] | None = None) -> int:
    """Plan every run, fit, write the markdown report."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "accuracy.md")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="accuracy-") as tmp:
        dirs = checkpoints(Path(tmp))
        rows = evaluate(dirs)
        result = fit(rows)
        memory = memory_accuracy.evaluate(memory_accuracy.checkpoints(Path(tmp) / "memory"))
    text = render(rows, result, PUBLISHED_PARAMS)
    text = text.rstrip("\n") + "\n\n" + "\n".join(memory_report.render(memory)) + "\n"
    old = args.out.read_text() if args.out.exists() else ""
    if "<!-- plan-vs-trace:begin -->" in old:  # benchmarks/plan_vs_trace.py's block stays
        block = "<!-- plan-vs-trace:begin -->" + old.split("<!-- plan-vs-trace:begin -->", 1)[1]
        text += "\n" + block.rstrip("\n") + "\n"
    args.out.write_text(text)
    s = memory_accuracy.summary(memory)
    print(f"peak memory: {s['within10']}/{s['n']} within +-10%, {s['within20']} within +-20%")
    eager = [r for r in rows if not r["run"].compiled]
    outside = [r["run"].id for r in eager if abs(r["tokens_ratio"] - 1) > TARGET_TOKENS]
    print(f"wrote {args.out}: {len(rows)} runs, {len(eager)} eager, outside +-20%: {outside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
