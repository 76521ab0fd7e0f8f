"""The fake-CUDA harness for tests and benchmarks: the trainer's own step, N fake ranks in one
process, at a public model's shapes (veri_tui/trainer/fakecuda, docs/trace.md).

- `checkpoint(folder, config, layers=None)`: a header-only checkpoint (support/synthetic.py)
  with the config.json transformers needs to build it; `layers` keeps the widths and
  changes the depth (a model's memory is affine in its layer count: docs/trace.md);
- `job_spec(model, ranks, **knobs)`: the job spec a launch writes, the knobs split as the
  plan resolves them (resolved_parallelism) and as the user sets them (hyperparameters);
- `traced(model, ranks, tmp, **knobs)`: the spec through the trainer's config and traced
  (veri_tui.trainer.fakecuda.trace.trace); the Trace comes back;
- `start_autograd_on_fake_cuda()`: a process's first backward, on the fake device (the suite
  does it in every worker before any test: tests/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.synthetic import moe_tensors, write_checkpoint
from veri_tui.jobfolder.knobs import PIN_KEYS

ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "mixtral": "MixtralForCausalLM",
}  # fmt: skip
MOE_TYPES = ("qwen3_moe", "qwen2_moe", "mixtral")


def checkpoint(folder: Path, config: dict[str, Any], layers: int | None = None) -> Path:
    """A header-only checkpoint of `config` (a support/synthetic.py dict) in `folder`."""
    full = dict(config, architectures=[ARCHITECTURES[config["model_type"]]])
    full.setdefault("torch_dtype", "bfloat16")
    if layers is not None:
        full["num_hidden_layers"] = layers
    tensors = moe_tensors(full) if full["model_type"] in MOE_TYPES else None
    write_checkpoint(folder, full, tensors=tensors)
    return folder


def job_spec(model: Path, ranks: int, method: str = "sft_text", **knobs: Any) -> dict[str, Any]:
    """A job spec for `model` on `ranks` GPUs: stage 3, mbs 1, no checkpointing, 2048 tokens
    (1024 per DPO side) unless `knobs` say otherwise."""
    resolved: dict[str, Any] = {
        "data_parallel_size": ranks, "zero_stage": 3, "micro_batch_size": 1,
        "gradient_accumulation_steps": 1, "precision": "bf16",
        "activation_checkpointing": "none",
    }  # fmt: skip
    hyper: dict[str, Any] = {"max_seq_length": 2048, "max_length": 1024}
    for key, value in knobs.items():
        (resolved if key in PIN_KEYS else hyper)[key] = value
    return {"method": method, "model_path": str(model), "dataset": str(model / "none.jsonl"),
            "hyperparameters": hyper, "resolved_parallelism": resolved}  # fmt: skip


def write_job(folder: Path, spec: dict[str, Any]) -> Path:
    """job.json holding `spec`, in `folder` (the trace's job folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.json"
    path.write_text(json.dumps({"spec": spec}))
    return path


def traced(
    model: Path, ranks: int, job_dir: Path, method: str = "sft_text", save: bool = True,
    **knobs: Any,
) -> Any:  # fmt: skip
    """Trace the job (`job_spec`) as rank 0 of `ranks`; the Trace (trace.py). `save`: plan
    the checkpoint's save and resume too."""
    from veri_tui.trainer.config import from_spec
    from veri_tui.trainer.fakecuda.trace import trace

    cfg = from_spec(job_spec(model, ranks, method, **knobs), job_dir)
    return trace(cfg, ranks, save=save)


def start_autograd_on_fake_cuda() -> bool:
    """Run this process's first backward on a fake CUDA tensor, so that a later trace here
    works whatever ran before it; False where the fake device is not available (another
    torch). torch's autograd engine sizes its per-device queues once, at a process's first
    backward, from the device guards registered then: after a CPU-only first backward it has
    none, and every later backward of a fake CUDA tensor fails an internal assert
    (`device_ready_queues_`), so in-process traces passed or failed by which test a pytest
    worker ran first."""
    import torch

    from veri_tui.trainer.fakecuda import device, runtime

    try:
        device.check_torch()
    except device.FakeCudaError:
        return False
    with device.installed(), runtime.patched(8, "first backward"), runtime.Mode():
        layer = torch.nn.Linear(2, 2, device="cuda")
        layer(torch.empty(1, 2, device="cuda")).sum().backward()
    return True
