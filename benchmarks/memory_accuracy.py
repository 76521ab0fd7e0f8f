"""The plan's peak memory per GPU against published, measured peaks (benchmarks/
published_memory.py), for benchmarks/estimate_accuracy.py.

Each run is planned with `veri_tui.plan.plan(...)` as a user would plan it (the knobs the
run used, the bundled trainer's memory: column `bundled`), then as it ran: the same plan
with the facts its source states about how it held memory (its loss, its LoRA dropout, its
optimizer's bytes and buffers, its 4-bit format; each quoted in MEMORY_FACTS), every other
term the plan's own (`as ran`, the judged figure). A figure the source gives as the device's
or the allocator's reserve is set against the plan's peak with its 2 GiB overhead; one given
as allocated, against the plan's allocated bytes. `before`: the planner before issue 19
(states + its activation estimate + its stage-3 gathers), run from git (commit BEFORE).
Nothing is fitted.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

from published_memory import MEMORY_FACTS, RUNS, SHAPES, MemRun, qwen_tensors

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "7e972e7"  # main before issue 19's memory model
TARGET = 0.10


def checkpoints(root: Path) -> dict[str, Path]:
    """Header-only checkpoints of every shape the memory rows use."""
    from support.synthetic import moe_tensors, write_checkpoint

    out = {}
    for name, config in SHAPES.items():
        # Qwen v1 as Llama names with its fused q/k/v; a mixture of experts with its experts.
        tensors = (
            qwen_tensors(config) if name.startswith("qwen-") else
            moe_tensors(config) if config.get("num_experts") else None
        )  # fmt: skip
        write_checkpoint(root / name, config, tensors=tensors)
        out[name] = root / name
    return out


def _knobs(run: MemRun) -> dict[str, Any]:
    return {
        "gpu": run.gpu, "gpu_count": run.gpu_count, "micro_batch_size": run.micro_batch_size,
        "max_seq_length": run.seq, "activation_checkpointing": run.checkpointing,
        "precision": run.precision, "lora_rank": run.lora_rank,
        "load_in_4bit": run.load_in_4bit, "zero_stage": run.zero_stage,
        "cpu_offload": run.cpu_offload,
    }  # fmt: skip


def _as_ran(run: MemRun, info: Any, rec: dict[str, Any], loss: str | None = None) -> dict[str, int]:
    """The plan with the run's stated facts applied (`loss`: another loss in its stead):
    the peak and allocated bytes."""
    from veri_tui.plan.activations import ActivationModel
    from veri_tui.plan.gpus import RESERVE_BYTES
    from veri_tui.plan.memory import ADAPTER_BYTES_PER_PARAM, BYTES_PER_PARAM

    facts = [MEMORY_FACTS[k] for k in run.facts]
    act, est = rec["activations"], rec["resolved_parallelism"]["memory_estimate"]
    # With cpu_offload the GPU's states are the units in flight (counted below, once) and the
    # optimizer lives on the host.
    offload = est["cpu_offload"]
    states = 0 if offload else est["states_bytes_per_gpu"]
    # What the knobs shard (stages 2 and 3) is on this GPU over the data-parallel ranks.
    dp = est["data_parallel_size"] if est["zero_stage"] else 1
    # The knobs' bytes per trainable parameter: the precision's, 16 for a LoRA adapter (fp32
    # in either precision, veri_tui/plan/memory.py).
    knobs = ADAPTER_BYTES_PER_PARAM if run.lora_rank else BYTES_PER_PARAM[run.precision]
    # The run's own, when a fact states it: the last such fact, the most specific (a QLoRA
    # row's fp16-with-master adapters over its LoRA fact's bf16 ones).
    held = next((f.trainable_bytes for f in reversed(facts) if f.trainable_bytes), None)
    if held is not None and not offload:
        states += -(-(held - knobs) * est["trainable_parameter_count"] // dp)
    for f in facts:
        if f.quant_bytes_per_param is not None:
            nf4 = (8192 + 256 + 4) / 16384
            states += int((f.quant_bytes_per_param - nf4) * info.quantized_parameters)
        states += int(f.extra_bytes)
    loss = loss or next((f.loss for f in facts if f.loss), "chunked")
    dropout = any(f.lora_dropout for f in facts)
    # The runs with facts hold bf16/fp16 weights under autocast or none: no autocast casts.
    model = ActivationModel.of(info, run.checkpointing, lora_rank=run.lora_rank)
    terms = model.terms(run.micro_batch_size * run.seq, loss=loss, lora_dropout=dropout)
    allocated = states + act["in_flight_bytes"] + terms.peak
    return {"peak": allocated + RESERVE_BYTES, "allocated": allocated}


_BEFORE_SCRIPT = """
import json, sys
import veri_tui
from veri_tui.plan import plan
assert veri_tui.__file__.startswith(sys.argv[1]), veri_tui.__file__  # the old tree, not ours
out = {}
for rid, model, knobs in json.load(sys.stdin):
    try:  # a shape the old planner cannot read (a mixture of experts) has no figure
        rec = plan(model=model, **knobs).to_dict()
    except Exception:
        continue
    a = rec["activations"]
    out[rid] = rec["states_bytes_per_gpu"] + a["bytes_per_gpu"] + a["transient_gather_bytes"]
print(json.dumps(out))
"""


def before(dirs: dict[str, Path]) -> dict[str, int]:
    """The peaks the planner gave before issue 19 (states + activations + stage-3 gathers),
    as a user would have planned each run (selective as checkpointing on, load_in_4bit then
    ignored); {} when git cannot give that commit."""
    try:
        blob = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE, "veri_tui", "trainer"],
            capture_output=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return {}
    jobs = []
    for run in RUNS:
        knobs = _knobs(run)
        knobs["gradient_checkpointing"] = knobs.pop("activation_checkpointing") != "none"
        jobs.append((run.id, str(dirs[run.shape]), knobs))
    with tempfile.TemporaryDirectory(prefix="before-") as tmp:
        tarfile.open(fileobj=BytesIO(blob)).extractall(tmp, filter="data")
        # cwd: `-c` puts it first on sys.path, before PYTHONPATH (so not this checkout).
        done = subprocess.run(
            [sys.executable, "-c", _BEFORE_SCRIPT, tmp], input=json.dumps(jobs), text=True,
            capture_output=True, cwd=tmp, check=False,
            env={"PYTHONPATH": tmp, "PATH": "", "VERI_HOME": str(Path(tmp) / "home")},
        )  # fmt: skip
    return json.loads(done.stdout) if done.returncode == 0 else {}


def evaluate(dirs: dict[str, Path]) -> list[dict[str, Any]]:
    """One row per published peak: measured, and planned before, now and as it ran."""
    from veri_tui.plan import plan, read_model_info

    old = before(dirs)
    rows = []
    for run in RUNS:
        info = read_model_info(str(dirs[run.shape]))
        rec = plan(model=str(dirs[run.shape]), **_knobs(run)).to_dict()
        peak = rec["activations"]["peak"]
        key = "allocated" if run.measured_as == "allocated" else "peak"
        bundled = peak["allocated_bytes"] if key == "allocated" else peak["peak_bytes"]
        held = _as_ran(run, info, rec)
        as_ran = held[key]
        # torchtitan's loss at its benchmark commit is unknown: the fp32 reading beside it.
        alt = _as_ran(run, info, rec, "ce_fp32")[key] if "titan-loss-as-read" in run.facts else None
        rows.append({
            "run": run, "bundled": bundled, "as_ran": as_ran, "before": old.get(run.id),
            "alt_ratio": alt / run.measured_bytes if alt else None,
            "ratio": as_ran / run.measured_bytes, "bundled_ratio": bundled / run.measured_bytes,
            # The same plan read as allocated bytes (no 2 GiB overhead): what the judged
            # figure would say were every published figure the allocator's, not the device's.
            "allocated_ratio": held["allocated"] / run.measured_bytes,
            "before_ratio": old[run.id] / run.measured_bytes if run.id in old else None,
            "parts": peak["parts"],
        })  # fmt: skip
    return rows


def summary(rows: list[dict[str, Any]], key: str = "ratio") -> dict[str, Any]:
    """Counts within +-10% and +-20%, and the median error, over the judged rows."""
    ratios = [r[key] for r in rows if r["run"].judged and r[key] is not None]
    errors = [abs(x - 1) for x in ratios]
    return {
        "n": len(ratios),
        "within10": sum(e <= TARGET for e in errors),
        "within20": sum(e <= 2 * TARGET for e in errors),
        "median": statistics.median(errors) if errors else None,
        "low": min(ratios, default=None),
        "high": max(ratios, default=None),
    }
