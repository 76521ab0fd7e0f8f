"""The GPU check's feature runs: one short run per trainer path a single GPU can take.

Each run names what it covers (COVERAGE lists every feature; tests/benchmarks/test_gpu_check.py
checks that the prepared runs cover them all). Layouts the planner refuses on one GPU
(zero_stage 3 and cpu_offload need gpu_count > 1 there) are planned at zero_stage 0 for the
job record, then written into the trainer's spec and re-planned with the planner's own
functions at dp=1 (`layout_peak`): the terms a rank of a multi-GPU job of that layout holds,
with dp=1. Stdlib only at import (the GPU machine imports the run half).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Every path of the trainer the check must take on one GPU.
COVERAGE = (
    "bf16", "zero_stage 0 (one rank)", "zero_stage 3 (FSDP2, one rank)", "cpu_offload",
    "lora", "dpo", "selective checkpointing", "full checkpointing", "no checkpointing",
    "checkpoint save", "checkpoint resume", "fp32", "moe", "qlora",
)  # fmt: skip


@dataclass(frozen=True)
class Feature:
    """One feature run: what the planner is asked, what the spec then runs, what it covers."""

    name: str
    covers: tuple[str, ...]
    shape: str = "qwen3-0.6b"
    method: str = "sft_text"
    knobs: dict[str, Any] = field(default_factory=dict)  # planned (valid on one GPU)
    layout: dict[str, Any] = field(default_factory=dict)  # run (the planner refuses it there)
    fault: str | None = None  # VERI_FAULT for a first attempt that fails, then a resume
    needs: str | None = None  # a module the GPU machine must import (else: not judged)


FEATURES = (
    Feature("stage3-1rank", ("bf16", "zero_stage 3 (FSDP2, one rank)", "full checkpointing"),
            layout={"zero_stage": 3}),
    Feature("cpu-offload", ("cpu_offload",), layout={"zero_stage": 3, "cpu_offload": True}),
    # A first attempt saves step 3 and fails at step 5 (an injected error); the supervisor's resume
    # (veri_tui.jobfolder.contract.attempts.prepare_resume) runs attempt 2 from the verified step-3.
    Feature("lora-dpo-selective-resume",
            ("lora", "dpo", "selective checkpointing", "checkpoint save", "checkpoint resume"),
            method="dpo",
            knobs={"lora_rank": 16, "activation_checkpointing": "selective",
                   "checkpoint_steps": 3},
            fault="raise:0:5"),
    Feature("fp32-nogc", ("fp32", "no checkpointing", "zero_stage 0 (one rank)"),
            knobs={"precision": "fp32", "gradient_checkpointing": False}),
    Feature("moe", ("moe",), shape="qwen3-moe"),
    Feature("qlora", ("qlora",), knobs={"lora_rank": 16, "load_in_4bit": True},
            needs="bitsandbytes"),
)  # fmt: skip


def covered(names: list[str] | None = None) -> set[str]:
    """What the feature runs named (all when None) cover."""
    return {c for f in FEATURES if names is None or f.name in names for c in f.covers}


def layout_peak(info: Any, gpu: Any, job: Any, mbs: int, layout: dict[str, Any]) -> dict:
    """The planner's states and peak terms (veri_tui/plan/peak.py) for `job` run with
    `layout` at dp=1: {"states_bytes", "activations" (with its "peak")}."""
    from veri_tui.plan.memory import estimate_states
    from veri_tui.plan.peak import estimate_peak, peak_parts

    hp = job.hyperparameters
    stage = int(layout.get("zero_stage", 0))
    est = estimate_states(
        info, precision=hp.precision, zero_stage=stage, dp=1, lora_rank=hp.lora_rank,
        dpo=job.method == "dpo", cpu_offload=bool(layout.get("cpu_offload")),
        load_in_4bit=hp.load_in_4bit,
    )  # fmt: skip
    act = estimate_peak(
        info, gpu, est, method=job.method, micro_batch_size=mbs,
        max_seq_length=hp.max_seq_length, max_length=hp.max_length,
        activation_checkpointing=hp.checkpointing,
        packing=hp.packing and job.method == "sft_text",
    )  # fmt: skip
    act["peak"] = peak_parts(act, est, gpu)
    return {"states_bytes": est.states_bytes_per_gpu, "activations": act}


def apply_layout(record: dict[str, Any], layout: dict[str, Any], states: int) -> None:
    """Write the run's layout into job.json's spec (the trainer reads resolved_parallelism)."""
    spec = record["spec"]
    spec["resolved_parallelism"].update(layout)
    spec.setdefault("hyperparameters", {}).update(layout)
    spec["states_bytes_per_gpu"] = states
    knobs = " ".join(f"{k}={v}" for k, v in layout.items())
    spec["plan_header"] = [*spec.get("plan_header", []),
                           f"gpu_check: run with {knobs} on one rank (planned at dp=1: "
                           f"{states / 1e9:.2f} GB states)"]  # fmt: skip
