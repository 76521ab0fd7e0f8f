"""QLoRA's 4-bit base as the plan counts it, against the modules transformers quantises.

load_in_4bit hands every `nn.Linear` of the model but the head (and tied weights) to
bitsandbytes, whether LoRA adapts it or not. The selection is read from transformers' own
code on the bundled tiny models built on the meta device: `get_keys_to_not_convert` and
`should_convert_module` (quantizers/), and the module types `replace_with_bnb_linear`
replaces (integrations/bitsandbytes.py: `type(module) is nn.Linear`, or GPT-2's Conv1D). With
bitsandbytes installed, `replace_with_bnb_linear` itself runs and its `Linear4bit` modules
are counted instead (it has no CPU path here, so CI reads the code). The plan's NF4 weights
(`quantized_parameters`) and its frozen base must be exactly those, for a mixture of
experts (LoRA on attention only: the dense layer's MLP is quantised too, the fused experts
and the router, transformers 5's 3-D parameters, are not) and for a dense model whose LoRA
adapts q_proj and v_proj only (its MLP and o_proj quantised all the same). Skipped under
transformers 4.x (.ci/lowest.sh's floor), which builds a MoE's experts as nn.Linear modules
and so quantises them too: the plan follows transformers 5, as contracts section 3 says.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from veri_tui.plan import plan
from veri_tui.plan.memory import FROZEN_BYTES, NF4_DEN, NF4_NUM
from veri_tui.plan.model_sources import read_model_info

ASSETS = Path(__file__).resolve().parents[2] / "veri_tui" / "assets"
# transformers 4.x builds each routed expert (and the router) of a MoE as nn.Linear modules,
# which bitsandbytes quantises too; the plan follows transformers 5 (contracts section 3).
TRANSFORMERS_4 = int(importlib.metadata.version("transformers").split(".")[0]) < 5


def _quantised_by_transformers(model_dir: Path) -> dict[str, int]:
    """{module name: weight parameters} of every module load_in_4bit stores in NF4."""
    import torch
    from torch import nn
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D
    from transformers.quantizers.base import get_keys_to_not_convert
    from transformers.quantizers.quantizers_utils import should_convert_module

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    skip = get_keys_to_not_convert(model)
    if importlib.util.find_spec("bitsandbytes") is not None:  # its own module selection
        import bitsandbytes as bnb
        from transformers import BitsAndBytesConfig
        from transformers.integrations import replace_with_bnb_linear

        config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        replace_with_bnb_linear(model, modules_to_not_convert=skip, quantization_config=config)
        found = {n: m for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
        return {n: m.in_features * m.out_features for n, m in found.items()}
    return {
        name: module.weight.numel()
        for name, module in model.named_modules()
        if should_convert_module(name, skip)
        and (isinstance(module, Conv1D) or type(module) is nn.Linear)
    }


@pytest.mark.parametrize(
    ("model", "targets"),
    [("tiny-moe", None), ("tiny-model", ["q_proj", "v_proj"])],
    ids=["moe-attention-lora", "dense-qv-lora"],
)
@pytest.mark.skipif(TRANSFORMERS_4, reason="the plan counts transformers 5's module selection")
def test_the_plan_quantises_what_transformers_quantises(
    model: str, targets: list[str] | None
) -> None:
    folder = ASSETS / model
    quantised = _quantised_by_transformers(folder)
    assert quantised and not any(n.endswith("lm_head") for n in quantised)  # the head stays
    total = sum(quantised.values())
    info = read_model_info(str(folder)).with_lora_targets(targets)
    # More than LoRA adapts: MoE's dense-layer MLP, or the dense model's MLP and o_proj.
    assert info.lora_target_parameters < total
    knobs = {"lora_target_modules": targets} if targets else {}
    rec = plan(model=str(folder), lora_rank=8, load_in_4bit=True, **knobs).to_dict()
    est = rec["resolved_parallelism"]["memory_estimate"]
    nf4 = -(-total * NF4_NUM // NF4_DEN)
    assert est["components"]["frozen_base"] == FROZEN_BYTES * (info.parameter_count - total) + nf4
    assert info.quantized_parameters == total
