"""The ways out are priced by the plan itself: applying a suggestion and planning the changed
job gives the bytes the suggestion named. And host memory per node counts the ranks the
launcher really puts on one host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from veri_tui.errors import VeriError
from veri_tui.plan import job_from_fields, plan_job
from veri_tui.plan.model_info import ModelInfo

NOT_FITTING = [
    # auto stage: lora_rank, cpu_offload, gpu_count
    ("llama-3.1-70b", {"gpu": "L4-24GB", "gpu_count": 4}),
    # requested stage 0: zero_stage 3 first; cpu_offload and gpu_count bring zero_stage 3
    ("llama-3.1-8b", {"gpu": "L4-24GB", "gpu_count": 8, "zero_stage": 0}),
    # requested stage 2 with data_parallel_size pinned: gpu_count brings both along
    ("llama-3.1-70b", {"gpu": "L4-24GB", "gpu_count": 4, "zero_stage": 2, "data_parallel_size": 4}),
    # LoRA still over at stage 3: cpu_offload and gpu_count
    ("llama-3.1-70b", {"gpu": "L4-24GB", "gpu_count": 4, "lora_rank": 16}),
    # fp32 DPO: bf16 offered, no gpu_count (the whole reference alone is over)
    ("llama-3.1-70b", {"gpu": "H100-80GB", "gpu_count": 8, "method": "dpo", "precision": "fp32"}),
    # one GPU: lora_rank and bf16 only
    ("qwen2.5-7b", {"gpu": "L4-24GB", "gpu_count": 1, "precision": "fp32"}),
    # one GPU, LoRA alone still over: QLoRA, and LoRA on the fewest GPUs that fit it
    ("llama-3.1-8b", {"gpu": "L4-24GB", "gpu_count": 1}),
    # a LoRA job on one GPU: load_in_4bit
    ("llama-3.1-8b", {"gpu": "L4-24GB", "gpu_count": 1, "lora_rank": 16}),
    # nothing fits on this GPU type at any count
    ("llama-3.1-70b", {"gpu": "custom-2.16GB", "gpu_count": 1}),
]


@pytest.mark.parametrize(("name", "fields"), NOT_FITTING)
def test_each_suggestion_is_the_plan_of_the_changed_job(
    infos: dict[str, ModelInfo], model_dirs: dict[str, Path], name: str, fields: dict[str, Any]
) -> None:
    base = {"model": str(model_dirs[name]), **fields}
    rec = plan_job(job_from_fields(base), infos[name])
    assert not rec.fits and rec.suggestions
    for s in rec.suggestions:
        changed = plan_job(job_from_fields({**base, **s.set}), infos[name])  # accepted
        assert changed.states_bytes_per_gpu == s.states_bytes_per_gpu, s.text
        assert changed.host_bytes_per_node == s.host_bytes_per_node, s.text
        assert changed.fits == s.fits, s.text
        assert s.to_dict() == rec.to_dict()["suggestions"][rec.suggestions.index(s)]
    # Those that fit come first: `ctrl+y` (the first) is one that fits whenever one does.
    fits = [s.fits for s in rec.suggestions]
    assert fits == sorted(fits, reverse=True), [s.text for s in rec.suggestions]


def test_llama_8b_on_one_l4_first_suggestion_fits(
    infos: dict[str, ModelInfo], model_dirs: dict[str, Path]
) -> None:
    """The issue's case: the first way out was `lora_rank=16 still over`."""
    base = {"model": str(model_dirs["llama-3.1-8b"]), "gpu": "L4-24GB"}
    rec = plan_job(job_from_fields(base), infos["llama-3.1-8b"])
    texts = [s.text for s in rec.suggestions]
    assert texts[0].startswith("lora_rank=16 load_in_4bit=true fits: "), texts
    assert texts[1].startswith("lora_rank=16 gpu_count=2 fits: "), texts
    assert texts[-1].startswith("lora_rank=16 still over: "), texts
    assert "none of these fits" not in rec.warnings[0]


def test_when_nothing_fits_the_warning_says_so(
    infos: dict[str, ModelInfo], model_dirs: dict[str, Path]
) -> None:
    # A budget of 9 MB (custom-2.16GB): LoRA would need more than MAX_SUGGESTED_GPUS.
    base = {"model": str(model_dirs["llama-3.1-70b"]), "gpu": "custom-2.16GB"}
    rec = plan_job(job_from_fields(base), infos["llama-3.1-70b"])
    assert rec.suggestions and not any(s.fits for s in rec.suggestions)
    assert rec.warnings[0].endswith("; none of these fits on custom-2.16GB: a GPU with more memory")
    # A GPU no bigger than the 2 GiB reserve has no budget at all: refused, saying why (it
    # was planned with a 0.0 GB budget, every way out "still over: 0.0 GB/GPU").
    with pytest.raises(VeriError) as err:
        plan_job(job_from_fields({**base, "gpu": "custom-2GB"}), infos["llama-3.1-70b"])
    assert err.value.errors[0].message.startswith(
        "custom-2GB: 2 GB is all taken by the 2.15 GB (2 GiB) reserved per GPU for the CUDA "
        "context and communication buffers, leaving nothing for the model"
    )


def test_gpu_count_suggestion_carries_the_keys_it_needs(
    infos: dict[str, ModelInfo], model_dirs: dict[str, Path]
) -> None:
    name, fields = NOT_FITTING[2]
    rec = plan_job(job_from_fields({"model": str(model_dirs[name]), **fields}), infos[name])
    more = [s for s in rec.suggestions if "gpu_count" in s.set]
    assert [s.set for s in more] == [
        # LoRA alone is still over: LoRA on the fewest GPUs that fit it, then the full
        # fine-tune's count, each with the keys it needs
        {"lora_rank": 16, "gpu_count": 10, "zero_stage": 3, "data_parallel_size": 10},
        {"gpu_count": 37, "zero_stage": 3, "data_parallel_size": 37},
    ]
    offload = [s for s in rec.suggestions if "cpu_offload" in s.set]
    assert offload[0].set == {"cpu_offload": True, "zero_stage": 3}


@pytest.mark.parametrize("gpu_count", [4, 16])
def test_host_memory_per_node_counts_every_rank_on_the_host(
    infos: dict[str, ModelInfo], model_dirs: dict[str, Path], gpu_count: int
) -> None:
    from veri_tui.launch.spec import make_record

    info = infos["llama-3.1-70b"]
    fields = {"model": str(model_dirs["llama-3.1-70b"]), "gpu": "H100-80GB"}
    job = job_from_fields({**fields, "gpu_count": gpu_count, "cpu_offload": True})
    rec = plan_job(job, info)
    spec = make_record(job, rec, "x", model_path="m", dataset="d", output_dir="o")["spec"]
    ranks_on_host = spec["nproc_per_node"]
    assert ranks_on_host == gpu_count  # the launcher runs every rank on one host
    # bf16: 8 bytes/param of sharded states, 1/gpu_count of them per rank
    assert rec.host_bytes_per_node == ranks_on_host * 8 * info.parameter_count // gpu_count
