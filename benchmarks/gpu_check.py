"""One-GPU check of the bundled trainer: throughput, MFU and memory against the plan.

    python benchmarks/gpu_check.py [--device cuda] [--steps 30] [--seq 2048] [--out DIR]
    python benchmarks/gpu_check.py --device cpu --shape small --seq 128 --steps 2   (CPU smoke)

Needs torch, transformers, safetensors (peft only for LoRA, unused here); imports nothing
of veri_tui (no pydantic on the GPU machine), so the job specs, plan lines and the state
estimate (contracts section 3: bf16 = 8 bytes/param, whole at zero_stage 0 and divided by
dp=1 at stage 3) are written here with the standard library. It builds a Qwen3-0.6B-shaped
model from a config (random weights, nothing downloaded), a long synthetic dataset, then
runs `torchrun --nproc-per-node 1 -m trainer` three times: as planned for one GPU
(zero_stage 0), through the FSDP2 path with world size 1 (zero_stage 3; the CLI refuses
sharding knobs on one GPU, so this spec is written by hand), and a short cpu_offload run.
It prints tokens/s, MFU against the dense bf16 peak and peak memory against the estimate,
and writes gpu_check.json / gpu_check.txt into --out (default $OUT when set).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = {
    # Qwen3-0.6B's published config.json, minus the weights.
    "qwen3-0.6b": dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
    ),
    "small": dict(
        hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=64, vocab_size=448, tie_word_embeddings=True,
        max_position_embeddings=4096,
    ),
}  # fmt: skip
GIB = 1024**3


def build_model(folder: Path, shape: str) -> tuple[int, dict]:
    """Random-init model from the config + the bundled tokenizer; returns (N, config)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**SHAPES[shape], bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    sys.path.insert(0, str(REPO))
    from trainer.model import dtype_kwarg

    model = AutoModelForCausalLM.from_config(config, **dtype_kwarg(torch.bfloat16))
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(REPO / "assets" / "tiny-model" / name, folder / name)
    # Parameters as the plan counts them: one copy of tied weights.
    return sum(p.numel() for p in model.parameters()), SHAPES[shape]


def build_dataset(path: Path, rows: int, seq: int) -> None:
    """Text rows longer than `seq` tokens of the bundled tokenizer (truncated by the trainer)."""
    words = "the cat lives in the barn and the owl lives in the forest".split()
    line = " ".join(words[i % len(words)] + str(i % 97) for i in range(seq * 2))
    with open(path, "w", encoding="utf-8") as fh:
        for r in range(rows):
            fh.write(json.dumps({"text": f"row {r}: {line}"}) + "\n")


def write_spec(
    job_dir: Path, args, model: Path, data: Path, n: int, *, stage: int, offload: bool, steps: int
) -> Path:
    """A job.json the way the launcher writes it, with a hand-made plan for one GPU."""
    budget = int(0.70 * (args.gpu_mem_bytes - 2 * GIB))
    states = 8 * n  # bf16: weights 2 + grads 2 + AdamW 4, dp=1 at both stages
    plan = (
        f"plan: dp=1 zero_stage={stage} tp=1 cp=1 mbs={args.mbs} grad_acc=1 gbs={args.mbs} "
        f"precision=bf16 gradient_checkpointing=on (requested: {states / 1e9:.1f} GB states/GPU)"
    )
    header = [
        f"model: {args.shape} (random init): {n:,} parameters",
        f"budget: {budget / 1e9:.1f} GB/GPU (70% of {args.gpu_mem_bytes / 1e9:.1f} GB after 2 GiB)",
        f"decision: gpu_check {'planned zero_stage 0' if stage == 0 else 'FSDP2 path, world 1'}"
        + (" + cpu_offload" if offload else ""),
        plan,
    ]
    resolved = {
        "data_parallel_size": 1, "zero_stage": stage, "micro_batch_size": args.mbs,
        "gradient_accumulation_steps": 1, "global_batch_size": args.mbs, "precision": "bf16",
        "gradient_checkpointing": True, "cpu_offload": offload,
    }  # fmt: skip
    spec = {
        "method": "sft_text", "model": str(model), "model_path": str(model),
        "dataset": str(data), "output_dir": str(job_dir / "output"), "gpu": args.gpu,
        "gpu_count": 1, "nproc_per_node": 1, "device": args.device,
        "hyperparameters": {
            "learning_rate": 1e-4, "max_steps": steps, "warmup_steps": 2,
            "max_seq_length": args.seq, "logging_steps": 1,
        },
        "resolved_parallelism": resolved, "plan_header": header, "states_bytes_per_gpu": states,
    }  # fmt: skip
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / "job.json"
    path.write_text(json.dumps({"job_id": job_dir.name, "status": "running", "spec": spec}))
    return path


def run_job(job: Path, timeout: float) -> dict:
    """torchrun one rank; collect metrics, the measured states and the wall time."""
    env = {**os.environ, "VERI_MEASURE_STATES": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
    cmd += ["-m", "trainer", "--job", str(job)]
    t0 = time.perf_counter()
    with open(job.parent / "torchrun.log", "w") as log:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout
        )
    rc = proc.returncode
    wall = time.perf_counter() - t0
    lines = (job.parent / "metrics.jsonl").read_text().splitlines() if rc == 0 else []
    measured = job.parent / "measured" / "rank-0.json"
    return {
        "rc": rc, "wall_s": round(wall, 1), "metrics": [json.loads(x) for x in lines],
        "measured": json.loads(measured.read_text()) if measured.exists() else None,
        "log_tail": (job.parent / "torchrun.log").read_text()[-2000:] if rc else "",
    }  # fmt: skip


def summarize(name: str, res: dict, n: int, cfg: dict, args) -> dict:
    """tokens/s (median after 3 warm-up steps), MFU, peak memory vs the estimate."""
    rows = res["metrics"][3:] or res["metrics"]
    out = {"name": name, "rc": res["rc"], "wall_s": res["wall_s"]}
    if res["rc"] != 0 or not rows:
        out["error"] = res["log_tail"]
        return out
    tps = statistics.median(m["tokens_per_s"] for m in rows)
    # Model FLOPs per token (PaLM appendix B): 6N for the matmuls + 12 * L * d * seq for
    # attention; gradient-checkpointing recompute is hardware work and not counted.
    flops = 6 * n + 12 * cfg["num_hidden_layers"] * cfg["hidden_size"] * args.seq
    peak = max(m["peak_mem_bytes"] for m in res["metrics"])
    out.update(
        tokens_per_s=round(tps, 1),
        mfu=round(tps * flops / (args.peak_tflops * 1e12), 4) if args.peak_tflops else None,
        peak_mem_bytes=peak,
        states_estimate_bytes=8 * n,
        # With cpu_offload the states live in host memory (contracts section 3): the GPU
        # peak is then activations plus the layers in flight, not the states.
        states_where="host" if "offload" in name else "gpu",
        states_measured_bytes=(res["measured"] or {}).get("total"),
        final_loss=res["metrics"][-1]["loss"],
    )
    return out


def main(argv: list[str] | None = None) -> int:
    """Build, run the three jobs, print and write the results."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--offload-steps", type=int, default=6)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--mbs", type=int, default=4)
    p.add_argument("--gpu", default="H200-141GB")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak; 0 = no MFU")
    out = os.environ.get("OUT")
    p.add_argument("--out", type=Path, default=Path(out) if out else None)
    p.add_argument("--dry-run", action="store_true", help="write model, data and specs only")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device visible", file=sys.stderr)
            return 2
        args.gpu_mem_bytes = torch.cuda.get_device_properties(0).total_memory
        name = torch.cuda.get_device_name(0)
        print(f"gpu: {name}, {args.gpu_mem_bytes / GIB:.1f} GiB, torch {torch.__version__}")
    else:
        args.gpu_mem_bytes = 24 * 10**9
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    t0 = time.perf_counter()
    n, cfg = build_model(work / "model", args.shape)
    rows = args.mbs * (max(args.steps, args.offload_steps) + 1)
    build_dataset(work / "data.jsonl", rows, args.seq)
    took = time.perf_counter() - t0
    print(f"model: {args.shape}, {n:,} parameters, built in {took:.1f} s ({work})")
    runs = {
        "planned-zero0": dict(stage=0, offload=False, steps=args.steps),
        "fsdp2-world1-zero3": dict(stage=3, offload=False, steps=args.steps),
        "fsdp2-cpu-offload": dict(stage=3, offload=True, steps=args.offload_steps),
    }
    model, data = work / "model", work / "data.jsonl"
    jobs = {k: write_spec(work / k, args, model, data, n, **v) for k, v in runs.items()}
    if args.dry_run:
        print("\n".join(str(j) for j in jobs.values()))
        print(f"dry run: kept {work} (remove it when done)")
        return 0
    results = []
    for name, job in jobs.items():
        res = summarize(name, run_job(job, timeout=240), n, cfg, args)
        results.append(res)
        print(json.dumps(res))
        if name != "fsdp2-cpu-offload":
            shutil.rmtree(job.parent / "output", ignore_errors=True)  # 1.2 GB each
    lines = [f"gpu_check on {args.device} ({args.shape}, seq {args.seq}, mbs {args.mbs})"]
    for r in results:
        if r.get("error"):
            lines.append(f"{r['name']}: FAILED rc={r['rc']}")
            continue
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        measured = (r["states_measured_bytes"] or float("nan")) / 1e9
        lines.append(
            f"{r['name']}: {r['tokens_per_s']:.0f} tokens/s, MFU {mfu} of "
            f"{args.peak_tflops:.0f} TFLOP/s, peak {r['peak_mem_bytes'] / 1e9:.2f} GB vs states "
            f"estimate {r['states_estimate_bytes'] / 1e9:.2f} GB on {r['states_where']} (measured "
            f"{measured:.2f} GB), loss {r['final_loss']:.3f}, wall {r['wall_s']:.0f} s"
        )
    lines.append(f"total wall: {time.perf_counter() - t0:.0f} s")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1))
        (args.out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
