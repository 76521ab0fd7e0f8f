"""The GPU check's preparing half: plans and job specs, made where veri-tui is installed.

    python benchmarks/gpu_check.py --prepare [DIR] [--gpu H100-80GB,H200-141GB] [--device cpu]

The GPU machine has torch, transformers, peft and safetensors but not pydantic, textual or
paramiko, so everything that needs the planning core happens here: each run is planned with
`veri_tui.plan.plan_job` on a header-only checkpoint of the shape (nothing downloaded), its
job.json is written by the launcher's own `make_record`, once for each GPU the check may find
(`GPUS`: it runs the plan of the GPU it finds, by the name CUDA gives it: gpu_check_device.py),
and the figures the plan predicts go into DIR/plan.json: the planner's own peak terms
(veri_tui/plan/peak.py: allocated bytes with the optimizer step's temporary when it is the
larger moment, and with the 2 GiB overhead), tokens/s, the planner's FLOPs per token, the
GPU's dense bf16 peak. The feature
runs (gpu_check_features.py) come first, then the performance grid. Paths that only exist
on the GPU machine are written as `@WORK@/...` and filled in there (benchmarks/gpu_check.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpu_check_features import FEATURES, Feature, apply_layout, covered, layout_peak
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
    # A small Qwen3-MoE (16 routed experts, 2 a token, every layer sparse): the MoE run.
    "qwen3-moe": {
        **QWEN3, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 12,
        "moe_intermediate_size": 384, "num_experts": 16, "num_experts_per_tok": 2,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001, "output_router_logits": False,
    },
    # The CPU mode's stand-in: the same architecture at a size 2 CPU ranks train in seconds.
    "tiny": {
        **QWEN3, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 448,
        "max_position_embeddings": 4096,
    },
}  # fmt: skip
SHAPES["tiny-moe"] = {
    **SHAPES["qwen3-moe"], **{k: SHAPES["tiny"][k] for k in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "max_position_embeddings")},
    "intermediate_size": 256, "moe_intermediate_size": 64, "num_experts": 4,
}  # fmt: skip
#: The feature runs' shapes for a small stand-in (the CPU mode: --feature-shape tiny).
TINY_FOR = {"qwen3-0.6b": "tiny", "qwen3-moe": "tiny-moe"}
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
    feature: Feature | None = None,
) -> dict[str, Any]:
    """Plan one run (a performance run, or `feature`'s); returns {"name", "record" (job.json),
    "expected"}. The expected peak is the planner's own (veri_tui/plan/peak.py): allocated
    bytes = states + activations + logits + units in flight, or states + the optimizer
    step's temporary when that is larger; device bytes = that + the 2 GiB overhead."""
    from veri_tui.launch.spec import make_record
    from veri_tui.plan import get_gpu, job_from_fields, plan_job, read_model_info

    method = feature.method if feature else "sft_text"
    length = "max_seq_length" if method == "sft_text" else "max_length"
    fields = {
        "model": str(model_dir), "method": method, "gpu": gpu, "gpu_count": gpu_count,
        "micro_batch_size": mbs, "gradient_checkpointing": gc, length: seq,
        "max_steps": steps, "warmup_steps": 1, "learning_rate": 1e-4, "logging_steps": 1,
        **(feature.knobs if feature else {}),
    }  # fmt: skip
    job = job_from_fields(fields)
    planned = plan_job(job, count_tokens=False)
    rec = planned.to_dict()
    name = feature.name if feature else run_name(shape, mbs, gc)
    data = {"kind": "dpo" if method == "dpo" else "text", "seq": seq}
    dataset = f"{WORK}/{data['kind']}-{seq}.jsonl"
    record = make_record(
        job, planned, name, model_path=f"{WORK}/models/{shape}", dataset=dataset,
        output_dir=f"{WORK}/jobs/{name}/output", model_name=f"{shape} (random init)",
    )  # fmt: skip
    record["spec"]["device"] = device
    info = read_model_info(str(model_dir))
    states, act = rec["states_bytes_per_gpu"], rec["activations"]
    layout = feature.layout if feature else {}
    if layout:  # planned at dp=1 with the planner's functions; the spec runs it
        terms = layout_peak(info, get_gpu(gpu), job, mbs, layout)
        states, act = terms["states_bytes"], terms["activations"]
        apply_layout(record, layout, states)
    peak = get_gpu(gpu).bf16_dense_tflops
    flops = model_flops_per_token(info, seq)
    # A layout the planner refused here has no throughput plan of its own: not compared.
    tps_gpu = None if layout else rec["throughput"]["tokens_per_s"] / gpu_count
    zero = layout.get("zero_stage", rec["resolved_parallelism"]["zero_stage"])
    expected = {
        "name": name, "shape": shape, "kind": "feature" if feature else "performance",
        "covers": list(feature.covers) if feature else [], "method": method,
        "fault": feature.fault if feature else None, "needs": feature.needs if feature else None,
        "data": data, "parameter_count": rec["parameter_count"],
        "micro_batch_size": mbs, "checkpointing": job.hyperparameters.checkpointing,
        "gradient_checkpointing": job.hyperparameters.checkpointing != "none",
        "seq": seq, "steps": steps, "gpu": gpu, "gpu_count": gpu_count, "zero_stage": zero,
        "cpu_offload": bool(layout.get("cpu_offload")), "plan_line": rec["plan_line"],
        "states_bytes": states, "activation_bytes": act["bytes_per_gpu"],
        "transient_bytes": act["transient_gather_bytes"],
        "peak_parts": act["peak"]["parts"],
        "peak_bytes": act["peak"]["allocated_bytes"],
        "device_peak_bytes": act["peak"]["peak_bytes"],
        "tokens_per_s_per_gpu": tps_gpu, "model_flops_per_token": flops,
        "peak_tflops": peak, "mfu": mfu(tps_gpu, flops, peak) if peak and tps_gpu else None,
    }  # fmt: skip
    return {"name": name, "record": record, "expected": expected}


#: The GPUs a device machine may be: the check picks the plan of the one it finds (by name).
GPUS = ("H100-80GB", "H200-141GB")


def prepare(
    out: Path,
    *,
    shapes: list[str],
    mbs_list: list[int],
    gc_list: list[bool],
    seq: int,
    steps: int,
    gpus: list[str],
    gpu_count: int,
    device: str,
    features: list[str] | None = None,
    feature_seq: int = 1024,
    feature_steps: int = 6,
    feature_shape: str | None = None,
    wheels: list[Path] | None = None,
    wheel_note: str = "",
) -> dict[str, Any]:
    """Write the prepared folder `out`, for each GPU of `gpus` (the check runs the plan of the
    GPU it finds): DIR/plan.json ({"gpus", "device", "wheels", "wheel_note", "plans": {gpu:
    that GPU's summary}}), DIR/models/<shape>/config.json and DIR/runs/<gpu>/<name>/job.json:
    the performance grid (shapes x mbs x gc), then the feature runs named (`features`, None
    for none; gpu_check_features.FEATURES), on `feature_shape` ("tiny": the small stand-ins)
    at `feature_seq` for `feature_steps` steps; `wheels` go into DIR/wheels (the GPU machine
    unpacks them: bitsandbytes for QLoRA, gpu_check_wheels.slim). Written beside and moved
    into place whole: a folder of an earlier preparation is replaced, never mixed."""
    # The header-only checkpoint writer is test support (tests/support/synthetic.py).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gpu_check_wheels import slim
    from support.synthetic import moe_tensors, write_checkpoint

    chosen = [f for f in FEATURES if f.name in (features or [])]
    unknown = sorted(set(features or []) - {f.name for f in FEATURES})
    if unknown:
        raise ValueError(f"features: unknown {', '.join(unknown)}; known: "
                         f"{', '.join(f.name for f in FEATURES)}")  # fmt: skip

    def shape_of(f: Feature) -> str:
        return TINY_FOR.get(f.shape, f.shape) if feature_shape == "tiny" else f.shape

    all_shapes = list(dict.fromkeys([*shapes, *map(shape_of, chosen)]))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    new.chmod(0o755)  # mkdtemp makes it 700: a folder to share like the tree
    tmp = Path(tempfile.mkdtemp(prefix="gpu-check-headers-"))
    plans: dict[str, Any] = {}
    try:
        for shape in all_shapes:
            config = SHAPES[shape]  # header-only: kilobytes on disk; a MoE's experts its own
            write_checkpoint(
                tmp / shape,
                config,
                tensors=moe_tensors(config) if config.get("num_experts") else None,
            )
            (new / "models" / shape).mkdir(parents=True)
            shutil.copy(tmp / shape / "config.json", new / "models" / shape / "config.json")
        for gpu in gpus:
            runs = [plan_run(tmp / shape_of(f), shape_of(f), gpu=gpu, gpu_count=gpu_count,
                             mbs=1, gc=True, seq=feature_seq, steps=feature_steps,
                             device=device, feature=f) for f in chosen]  # fmt: skip
            runs += [plan_run(tmp / shape, shape, gpu=gpu, gpu_count=gpu_count, mbs=mbs, gc=gc,
                              seq=seq, steps=steps, device=device)
                     for shape in shapes for mbs in mbs_list for gc in gc_list]  # fmt: skip
            for run in runs:
                folder = new / "runs" / gpu / run["name"]
                folder.mkdir(parents=True)
                (folder / "job.json").write_text(json.dumps(run["record"], indent=1) + "\n")
            plans[gpu] = {
                "gpu": gpu, "gpu_count": gpu_count, "device": device, "seq": seq,
                "steps": steps, "shapes": all_shapes,
                "coverage": sorted(covered([f.name for f in chosen])),
                "runs": [r["expected"] for r in runs],
            }  # fmt: skip
        carried = [slim(w, new / "wheels").name for w in wheels or []]
        index = {"gpus": list(gpus), "device": device, "shapes": all_shapes,
                 "wheels": carried, "wheel_note": wheel_note, "plans": plans}  # fmt: skip
        for summary in plans.values():
            summary["wheels"] = carried
        (new / "plan.json").write_text(json.dumps(index, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        new.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)
    return index
