"""The bundled tiny mixture of experts (assets/tiny-moe: Qwen3-MoE, a dense layer, then 8
routed experts with 2 per token) through the trainer and against the plan.

- Fast: the trainer's LoRA targets (peft, on the real model) are the plan's: attention only,
  the adapter's size equals `ModelInfo.adapter_parameters`; the MoE layer's saved tensors
  per token equal the activation model's MoE terms (transformers 5's grouped experts).
- Slow, one 2-rank torchrun (gloo): LoRA under DDP (zero_stage 0) and FSDP2 (zero_stage 2
  and 3, which shards the fused experts on their expert dim) and a full fine-tune at
  zero_stage 3 train end to end; every rank's measured state bytes match the plan within
  2%; the LoRA jobs' losses are the same at every stage; the artifacts load (peft's
  PeftModel, transformers' from_pretrained) and the full one stores one tensor per expert,
  as the base does.
"""

from __future__ import annotations

import json
import math

import pytest
from trainer_jobs import TINY_MOE, metrics, run_many, write_job

from veri_tui.plan import read_model_info

JOBS = {"ddp-lora": (0, 4), "z2-lora": (2, 4), "z3-lora": (3, 4), "z3-full": (3, 0)}


def test_trainer_lora_targets_are_the_plans() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from veri_tui.trainer.model import lora_targets

    info = read_model_info(str(TINY_MOE))
    model = AutoModelForCausalLM.from_pretrained(TINY_MOE, dtype=torch.bfloat16)
    targets, moe = lora_targets(model)
    assert moe and targets == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert sorted(targets) == info.lora_target_modules
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets))
    adapter = sum(p.numel() for n, p in peft_model.named_parameters() if p.requires_grad)
    assert adapter == info.adapter_parameters(4) == 4 * info.lora_in_out_sum
    assert not any("experts" in n for n, p in peft_model.named_parameters() if p.requires_grad)


def test_moe_layer_saves_what_the_activation_model_counts() -> None:
    """Saved tensors of the MoE block (its parameters and input left out), per token."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    from veri_tui.plan.activations import ActivationModel

    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 runs the experts one by one (2h more per routed copy)")
    info = read_model_info(str(TINY_MOE))
    model = AutoModelForCausalLM.from_pretrained(TINY_MOE, dtype=torch.bfloat16)
    block = model.model.layers[1].mlp
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    tokens = 256
    x = torch.randn(1, tokens, info.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, int] = {x.untyped_storage().data_ptr(): 0}  # the input is the norm's

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in saved:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    per_token = sum(saved.values()) / tokens
    # The residual (12.1 of 1136 bytes here): norm_topk_prob's fp32 top-k weights and their
    # sum (4k + 4) and the int32 expert offsets, which the model leaves out.
    planned = next(k for k in ActivationModel.of(info, "none").kinds if k.moe).mlp_saved()
    assert per_token == pytest.approx(planned, rel=0.02)
    assert per_token > planned


def test_full_fine_tune_of_per_expert_modules_is_refused_on_several_ranks() -> None:
    """transformers 4's MoE (one nn.Linear per expert), without transformers 4 installed."""
    from pathlib import Path

    from torch import nn

    from veri_tui.jobfolder.contract.errors import ConfigError
    from veri_tui.trainer.config import TrainConfig
    from veri_tui.trainer.model import check_experts

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate = nn.Linear(4, 2)
            self.experts = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    model = nn.Sequential(Block())
    cfg = TrainConfig(Path("."), "sft_text", "m", Path("d"), Path("."))
    cfg.data_parallel_size = 2
    with pytest.raises(ConfigError, match="lora_rank: a full fine-tune of this mixture"):
        check_experts(model, cfg)
    cfg.lora_rank = 4
    check_experts(model, cfg)  # LoRA: the experts stay frozen
    cfg.lora_rank, cfg.data_parallel_size = 0, 1
    check_experts(model, cfg)  # one rank: nothing to disagree about


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("moe-jobs")
    jobs = {
        name: write_job(
            root / name,
            model=TINY_MOE,
            plan_with=TINY_MOE,
            zero_stage=stage,
            lora_rank=lora,
            max_steps=4,
            micro_batch_size=2,
        )
        for name, (stage, lora) in JOBS.items()
    }
    run_many(list(jobs.values()), env={"VERI_MEASURE_STATES": "1"})
    out = {}
    for name, job in jobs.items():
        spec = json.loads(job.read_text())["spec"]
        ranks = [
            json.loads((job.parent / "measured" / f"rank-{r}.json").read_text()) for r in (0, 1)
        ]
        out[name] = {
            "dir": job.parent,
            "spec": spec,
            "ranks": ranks,
            "metrics": metrics(job.parent),
        }
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_moe_trains_end_to_end_and_its_states_match_the_plan(runs: dict) -> None:
    for name, run in runs.items():
        assert "experts: 8 routed, 2 per token" in "\n".join(run["spec"]["plan_header"])
        losses = [m["loss"] for m in run["metrics"]]
        assert len(losses) == 4 and all(math.isfinite(v) for v in losses), (name, losses)
        assert losses[-1] < losses[0], (name, losses)
        for rank in run["ranks"]:
            assert rank["total"] == pytest.approx(run["spec"]["states_bytes_per_gpu"], rel=0.02)
    # FSDP2 shards the experts (dim 0) like any parameter; the arithmetic stays the same.
    lora = [[m["loss"] for m in runs[n]["metrics"]] for n in ("ddp-lora", "z2-lora", "z3-lora")]
    assert lora[0] == lora[1] == lora[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tiny_moe_artifacts_load(runs: dict) -> None:
    import torch
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    out = runs["z3-lora"]["dir"] / "output"
    assert json.loads((out / "adapter_config.json").read_text())["target_modules"]
    base = AutoModelForCausalLM.from_pretrained(TINY_MOE, dtype=torch.bfloat16)
    tuned = PeftModel.from_pretrained(base, out)
    ids = torch.tensor([[1, 2, 3]])
    assert tuned.generate(input_ids=ids, max_new_tokens=2, do_sample=False).shape == (1, 5)
    full = runs["z3-full"]["dir"] / "output"
    with safe_open(full / "model.safetensors", "pt") as f:
        names = set(f.keys())
    with safe_open(TINY_MOE / "model.safetensors", "pt") as f:
        assert names == set(f.keys())  # one tensor per expert, as the base stores them
        before = f.get_tensor("model.layers.1.mlp.experts.5.down_proj.weight")
    model = AutoModelForCausalLM.from_pretrained(full)
    with safe_open(full / "model.safetensors", "pt") as f:
        after = f.get_tensor("model.layers.1.mlp.experts.5.down_proj.weight")
    assert not torch.equal(before, after)  # the experts trained
    assert model.generate(input_ids=ids, max_new_tokens=2, do_sample=False).shape == (1, 5)
