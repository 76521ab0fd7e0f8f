"""The plan against the trace: every feature's analytic allocated peak per GPU (veri_tui/plan)
beside the bundled trainer's own, traced on fake CUDA (veri_tui/trainer/fakecuda) at
Qwen3-0.6B's, Llama-3.1-8B's and Llama-3.1-70B's shapes (issue 37 item 4; docs/accuracy.md,
The plan against the trace).

    python benchmarks/plan_vs_trace.py [--sizes 0.6b,8b,70b] [--features z3,lora] [--write]

Every row is 8 ranks, 2048 tokens (1024 per DPO side), micro-batch 1, stage 3, bf16 and no
checkpointing unless its feature says otherwise, on a header-only checkpoint of the model's
config. A trace runs every op of the step, and ops grow with the layers, not the widths, so
each row is traced at 3 and 4 of the model's layers and extrapolated to all of them moment
by moment: the tracker keeps each phase's peak at its first layer, its last and in between
(Tracker.where_peaks), each affine in the layer count, and the row's traced peak is the
largest of them at the model's depth (docs/trace.md, the depth). --write puts the table
into docs/accuracy.md between its plan-vs-trace markers; exit 1 when a row is off by more
than TOLERANCE.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.fakecuda import checkpoint, job_spec  # noqa: E402
from support.synthetic import LLAMA_3_1_8B, LLAMA_3_1_70B, QWEN3_0_6B, QWEN3_30B_A3B  # noqa: E402

TOLERANCE = 0.03
RANKS = 8
DEPTHS = (3, 4)
SIZES: dict[str, dict[str, Any]] = {
    "0.6b": QWEN3_0_6B, "8b": LLAMA_3_1_8B, "70b": LLAMA_3_1_70B, "moe": QWEN3_30B_A3B,
}  # fmt: skip
#: feature -> (method, knobs) of issue 37's matrix (tests/trainer/test_fakecuda_features.py).
FEATURES: dict[str, tuple[str, dict[str, Any]]] = {
    "ddp": ("sft_text", {"zero_stage": 0}),
    "fsdp2_stage2": ("sft_text", {"zero_stage": 2}),
    "fsdp2_stage3": ("sft_text", {}),
    "cpu_offload": ("sft_text", {"cpu_offload": True}),
    "lora": ("sft_text", {"lora_rank": 16}),
    "lora_ddp": ("sft_text", {"lora_rank": 16, "zero_stage": 0}),
    "dpo_full": ("dpo", {}),
    "dpo_lora": ("dpo", {"lora_rank": 16}),
    "checkpointing_full": ("sft_text", {"activation_checkpointing": "full"}),
    "checkpointing_selective": ("sft_text", {"activation_checkpointing": "selective"}),
    "fp32": ("sft_text", {"precision": "fp32"}),
    "fp32_ddp": ("sft_text", {"precision": "fp32", "zero_stage": 0}),
    "eval": ("sft_text", {"eval_fraction": 0.1}),
    "packing": ("sft_text", {"packing": True}),
    "grad_accumulation": ("sft_text", {"gradient_accumulation_steps": 4}),
}
#: The mixture of experts has a shape of its own (Qwen3-30B-A3B), not a size of the others.
MOE_FEATURES = ("fsdp2_stage3", "lora")
BEGIN, END = "<!-- plan-vs-trace:begin -->", "<!-- plan-vs-trace:end -->"


def rows_wanted(sizes: list[str], features: list[str] | None = None) -> list[tuple[str, str]]:
    """(size, feature) pairs: every feature at each size, MOE_FEATURES at the MoE shape."""
    out = []
    for size in sizes:
        names = MOE_FEATURES if size == "moe" else FEATURES
        out += [(size, f) for f in names if features is None or f in features]
    return out


def _model(folder: Path, size: str, layers: int | None = None) -> Path:
    path = folder / (f"{size}-L{layers}" if layers else size)
    if not (path / "config.json").exists():
        checkpoint(path, SIZES[size], layers=layers)
    return path


def traced_peak(folder: Path, size: str, feature: str) -> tuple[int, str, float]:
    """The traced allocated peak at the model's depth, the moment it is at ("phase first |
    middle | last"), and the CPU seconds the two traces took."""
    from veri_tui.trainer.config import from_spec
    from veri_tui.trainer.fakecuda.trace import trace

    method, knobs = FEATURES[feature]
    t0 = time.process_time()
    where = []
    for layers in DEPTHS:
        cfg = from_spec(job_spec(_model(folder, size, layers), RANKS, method, **knobs),
                        folder / "job")  # fmt: skip
        where.append(trace(cfg, RANKS, save=False).tracker.where_peaks)
    (la, a), (lb, b) = zip(DEPTHS, where, strict=True)
    depth = SIZES[size]["num_hidden_layers"]
    at = {k: a[k] + (b[k] - a[k]) * (depth - la) // (lb - la) for k in a.keys() & b.keys()}
    moment = max(at, key=at.__getitem__)
    return at[moment], " ".join(moment), time.process_time() - t0


def planned_peak(folder: Path, size: str, feature: str) -> tuple[int, str]:
    """The plan's allocated peak per GPU (no overhead term) and its moment."""
    from veri_tui.plan import load_job_config, plan_job

    method, knobs = FEATURES[feature]
    spec = job_spec(_model(folder, size), RANKS, method, **knobs)
    knob = {**spec["resolved_parallelism"], **spec["hyperparameters"]}
    knob.pop("data_parallel_size")
    sets = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knob.items()]
    job = load_job_config(model=str(spec["model_path"]), method=method, gpu="H100-80GB",
                          gpu_count=RANKS, sets=sets)  # fmt: skip
    peak = plan_job(job, count_tokens=False).to_dict()["activations"]["peak"]
    return peak["allocated_bytes"], peak["moment"]


def row(folder: Path, size: str, feature: str) -> dict[str, Any]:
    """One row: the plan, the trace, their difference relative to the trace."""
    plan, plan_moment = planned_peak(folder, size, feature)
    trace_bytes, trace_moment, cpu = traced_peak(folder, size, feature)
    return {"size": size, "feature": feature, "plan": plan, "plan_moment": plan_moment,
            "trace": trace_bytes, "trace_moment": trace_moment,
            "delta": (plan - trace_bytes) / trace_bytes, "cpu_s": cpu}  # fmt: skip


def render(rows: list[dict[str, Any]], note: str) -> list[str]:
    """The markdown table (docs/accuracy.md)."""
    out = [BEGIN, note, "",
           "| feature | size | plan GB | trace GB | delta | plan's moment | trace's moment |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        mark = "" if abs(r["delta"]) <= TOLERANCE else " **out**"
        out.append(f"| {r['feature']} | {r['size']} | {r['plan'] / 1e9:.2f} | "
                   f"{r['trace'] / 1e9:.2f} | {100 * r['delta']:+.1f}%{mark} | "
                   f"{r['plan_moment']} | {r['trace_moment']} |")  # fmt: skip
    return [*out, END]


def write(path: Path, lines: list[str]) -> None:
    """Replace the marked block of `path` (or append it)."""
    text = path.read_text()
    block = "\n".join(lines)
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="0.6b,8b,70b,moe")
    p.add_argument("--features", default=None, help="comma-separated (default: all)")
    p.add_argument("--write", action="store_true", help="the table into docs/accuracy.md")
    args = p.parse_args(argv)
    os.environ.setdefault("VERI_HOME", tempfile.mkdtemp(prefix="plan-vs-trace-"))
    wanted = rows_wanted(args.sizes.split(","), args.features and args.features.split(","))
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="plan-vs-trace-") as tmp:
        for size, feature in wanted:
            r = row(Path(tmp), size, feature)
            rows.append(r)
            print(f"{size:5s} {feature:24s} plan {r['plan'] / 1e9:8.2f} GB  trace "
                  f"{r['trace'] / 1e9:8.2f} GB  {100 * r['delta']:+6.1f}%  "
                  f"({r['plan_moment']} / {r['trace_moment']}, {r['cpu_s']:.0f} CPU-s)",
                  flush=True)  # fmt: skip
    bad = [f"{r['size']} {r['feature']}" for r in rows if abs(r["delta"]) > TOLERANCE]
    wall = time.perf_counter() - t0
    note = (f"`python benchmarks/plan_vs_trace.py --write`: {len(rows)} rows, "
            f"{sum(r['cpu_s'] for r in rows):.0f} CPU-s of traces, {wall:.0f} s wall; "
            f"outside +-{TOLERANCE:.0%}: {', '.join(bad) or 'none'}.")  # fmt: skip
    print(note)
    if args.write:
        write(ROOT / "docs" / "accuracy.md", render(rows, note))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
