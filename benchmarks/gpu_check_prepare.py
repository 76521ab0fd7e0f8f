"""The GPU check's preparing half: plans and job specs, made where veri-tui is installed.

    python benchmarks/gpu_check.py --prepare DIR [--gpu H200-141GB] [--device cpu]

The GPU machine has torch, transformers, peft and safetensors but not pydantic, textual or
paramiko, so everything that needs the planning core happens here: each run is planned with
`veri_tui.plan.plan_job` on a header-only checkpoint of the shape (nothing downloaded), its
job.json is written by the launcher's own `make_record`, and the figures the plan predicts
(peak memory = states + activations, tokens/s, the planner's FLOPs per token, the GPU's dense
bf16 peak) go into DIR/plan.json. Paths that only exist on the GPU machine are written as
`@WORK@/...` and filled in there (benchmarks/gpu_check.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_check_report import mfu

# Qwen3 configs as published in the models' config.json (weights are never needed).
QWEN3 = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0,
    "pad_token_id": 0, "torch_dtype": "bfloat16",
}  # fmt: skip
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {**QWEN3, "hidden_size": 1024, "intermediate_size": 3072},
    "qwen3-1.7b": {**QWEN3, "hidden_size": 2048, "intermediate_size": 6144},
    # The CPU mode's stand-in: the same architecture at a size 2 CPU ranks train in seconds.
    "tiny": {
        **QWEN3, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 448,
        "max_position_embeddings": 4096,
    },
}  # fmt: skip
WORK = "@WORK@"  # replaced on the GPU machine by its work folder


def run_name(shape: str, mbs: int, gc: bool) -> str:
    """Folder name of one run, e.g. qwen3-0.6b-mbs4-gc."""
    return f"{shape}-mbs{mbs}-{'gc' if gc else 'nogc'}"


def model_flops_per_token(info: Any, seq: int) -> int:
    """The planner's FLOPs per token of a full fine-tune (6N + 12 L qd s), recompute excluded:
    the numerator of MFU, so checkpointing does not inflate it."""
    from veri_tui.plan.throughput import flops_per_token

    return flops_per_token(info, seq, lora=False, gc=False, dpo=False)["total"]


def plan_run(
    model_dir: Path,
    shape: str,
    *,
    gpu: str,
    gpu_count: int,
    mbs: int,
    gc: bool,
    seq: int,
    steps: int,
    device: str,
) -> dict[str, Any]:
    """Plan one run; returns {"name", "record" (job.json), "expected"}."""
    from veri_tui.launch.spec import make_record
    from veri_tui.plan import get_gpu, job_from_fields, plan_job, read_model_info

    fields = {
        "model": str(model_dir), "method": "sft_text", "gpu": gpu, "gpu_count": gpu_count,
        "micro_batch_size": mbs, "gradient_checkpointing": gc, "max_seq_length": seq,
        "max_steps": steps, "warmup_steps": 1, "learning_rate": 1e-4, "logging_steps": 1,
    }  # fmt: skip
    job = job_from_fields(fields)
    planned = plan_job(job)
    rec = planned.to_dict()
    name = run_name(shape, mbs, gc)
    record = make_record(
        job, planned, name, model_path=f"{WORK}/models/{shape}",
        dataset=f"{WORK}/data-{seq}.jsonl", output_dir=f"{WORK}/jobs/{name}/output",
        model_name=f"{shape} (random init)",
    )  # fmt: skip
    record["spec"]["device"] = device
    info = read_model_info(str(model_dir))
    peak = get_gpu(gpu).bf16_dense_tflops
    tput, act = rec["throughput"], rec["activations"]
    flops = model_flops_per_token(info, seq)
    tps_gpu = tput["tokens_per_s"] / gpu_count
    expected = {
        "name": name, "shape": shape, "parameter_count": rec["parameter_count"],
        "micro_batch_size": mbs, "gradient_checkpointing": gc, "seq": seq, "steps": steps,
        "gpu": gpu, "gpu_count": gpu_count, "zero_stage": rec["resolved_parallelism"]["zero_stage"],
        "plan_line": rec["plan_line"], "states_bytes": rec["states_bytes_per_gpu"],
        "activation_bytes": act["bytes_per_gpu"],
        "transient_bytes": act["transient_gather_bytes"],
        "peak_bytes": rec["states_bytes_per_gpu"] + act["bytes_per_gpu"]
        + act["transient_gather_bytes"],
        "tokens_per_s_per_gpu": tps_gpu, "model_flops_per_token": flops,
        "peak_tflops": peak, "mfu": mfu(tps_gpu, flops, peak) if peak else None,
    }  # fmt: skip
    return {"name": name, "record": record, "expected": expected}


def prepare(
    out: Path,
    *,
    shapes: list[str],
    mbs_list: list[int],
    gc_list: list[bool],
    seq: int,
    steps: int,
    gpu: str,
    gpu_count: int,
    device: str,
) -> dict[str, Any]:
    """Write DIR/plan.json, DIR/models/<shape>/config.json and DIR/runs/<name>/job.json."""
    # The header-only checkpoint writer is test support (tests/support/synthetic.py).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.synthetic import write_checkpoint

    tmp = Path(tempfile.mkdtemp(prefix="gpu-check-headers-"))
    runs = []
    try:
        for shape in shapes:
            write_checkpoint(tmp / shape, SHAPES[shape])  # header-only: kilobytes on disk
            (out / "models" / shape).mkdir(parents=True, exist_ok=True)
            shutil.copy(tmp / shape / "config.json", out / "models" / shape / "config.json")
            for mbs in mbs_list:
                for gc in gc_list:
                    runs.append(
                        plan_run(tmp / shape, shape, gpu=gpu, gpu_count=gpu_count, mbs=mbs,
                                 gc=gc, seq=seq, steps=steps, device=device)
                    )  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for run in runs:
        folder = out / "runs" / run["name"]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "job.json").write_text(json.dumps(run["record"], indent=1) + "\n")
    summary = {
        "gpu": gpu, "gpu_count": gpu_count, "device": device, "seq": seq, "steps": steps,
        "shapes": shapes, "runs": [r["expected"] for r in runs],
    }  # fmt: skip
    (out / "plan.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
