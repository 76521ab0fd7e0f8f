"""Which attention kernels the GPU picks for the check's models: the one kernel choice the
plan's memory rests on, asked of the GPU itself.

The planner counts attention as a flash-style kernel keeps it (q, k, v, the output and the
log-sum-exp; the fake-CUDA traces pin that kernel too). CUDA picks among flash,
memory-efficient, cuDNN and the math fallback, which materialises the S x S scores, by the
device, the dtype, the head size and the mask. So before the jobs, one child process loads
each model the check built (random weights, `attn_implementation="sdpa"` in bf16, as the
trainer does: veri_tui/trainer/model.py), runs one forward and backward of one row of the
runs' longest sequence with an all-ones attention mask (what the trainer's collate gives a
row that fills its sequence, as every row of the check does) under torch's profiler, and
counts the aten attention ops it dispatched. gpu_check.json keeps the counts per model
(`kernels`), and the log names the kernel. Stdlib only here; torch in the child.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The child's program: argv[1] a JSON list of {"shape", "folder", "seq"}, argv[2] the device
#: ("cuda"; "cpu" in the tests); prints one JSON line {shape: {aten op: count}} (or
#: {"error": ...} for a model that failed).
PROBE = """
import json, sys, torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM
device = sys.argv[2]
out = {}
for spec in json.loads(sys.argv[1]):
    try:
        model = AutoModelForCausalLM.from_pretrained(
            spec["folder"], attn_implementation="sdpa", dtype=torch.bfloat16).to(device)
        ids = torch.randint(0, model.config.vocab_size, (1, spec["seq"]), device=device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
            loss.backward()
            if device == "cuda":
                torch.cuda.synchronize()
        out[spec["shape"]] = {e.key: e.count for e in prof.key_averages()
                              if "attention" in e.key and e.key.startswith("aten::")}
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    except Exception as exc:
        out[spec["shape"]] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
print(json.dumps(out))
"""
NAMES = {"flash": "flash", "efficient": "memory-efficient", "cudnn": "cuDNN", "math": "math"}


def specs(plan: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """One probe per model shape, at the longest sequence its runs train."""
    seqs: dict[str, int] = {}
    for run in plan["runs"]:
        seqs[run["shape"]] = max(seqs.get(run["shape"], 0), int(run["seq"]))
    return [{"shape": s, "folder": str(work / "models" / s), "seq": q} for s, q in seqs.items()]


def probe(spec_list: list[dict[str, Any]], timeout: float, device: str = "cuda") -> dict:
    """{shape: {aten op: count}} from the child, or {"error": why} for the whole probe."""
    cmd = [sys.executable, "-c", PROBE, json.dumps(spec_list), device]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over its {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def kernel_of(counts: dict[str, Any]) -> str:
    """ "flash", "memory-efficient", "cuDNN", "math", or what the counts hold instead."""
    if "error" in counts:
        return f"not probed ({counts['error']})"
    names = [label for key, label in NAMES.items() if any(key in op for op in counts)]
    return " + ".join(names) or "no attention op seen"
