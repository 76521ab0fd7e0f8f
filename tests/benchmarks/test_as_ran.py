"""benchmarks/as_ran.py: the published runs planned as they ran. The recompute shares left
unset mean what gradient_checkpointing meant before; torchtitan's op-level policy recomputes
wk, wo and w3 of every layer; a described GPU's tables are added and then restored; rows with
no correction plan exactly as the public plan() does; the three rows outside the target
before the corrections were outside it as docs/accuracy.md said."""

from __future__ import annotations

import math

import as_ran
import estimate_accuracy
import pytest
from published_runs import RUNS, SHAPES

from veri_tui.plan import get_gpu, throughput
from veri_tui.plan.validate import NETWORK_GBPS


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    dirs = estimate_accuracy.checkpoints(tmp_path_factory.mktemp("shapes"))
    return estimate_accuracy.evaluate(dirs)


@pytest.fixture(scope="module")
def llama8b(rows: list[dict]):
    return next(r["info"] for r in rows if r["run"].shape == "llama-3.1-8b")


def _step(info, **knobs) -> float:
    base = {
        "method": "sft_text", "gpu_count": 8, "zero_stage": 3, "precision": "fp32",
        "lora_rank": 0, "micro_batch_size": 2, "gradient_accumulation_steps": 1,
        "max_seq_length": 8192, "max_length": 8192, "gradient_checkpointing": False,
    }  # fmt: skip
    return throughput.estimate_throughput(info, get_gpu("H100-80GB"), **{**base, **knobs})[
        "step_time_s"
    ]


def test_whole_recompute_shares_mean_what_checkpointing_meant(llama8b) -> None:
    for gc, share in ((True, 1.0), (False, 0.0)):
        given = _step(llama8b, recompute_fraction=share, recompute_elementwise=share)
        assert math.isclose(given, _step(llama8b, gradient_checkpointing=gc), rel_tol=1e-12)
    partial = _step(llama8b, recompute_fraction=0.25, recompute_elementwise=1.0)
    assert _step(llama8b) < partial < _step(llama8b, gradient_checkpointing=True)


def test_op_sac_recomputes_wk_wo_w3_of_every_layer(llama8b) -> None:
    flops, passes = as_ran.op_sac_recompute(llama8b, 8192)
    h, kv, inter = 4096, 8 * 128, 14336  # Llama 3.1 8B
    per_token = 2 * 32 * (h * kv + h * h + h * inter)
    forward = throughput.flops_per_token(llama8b, 8192, lora=False, gc=False, dpo=False)
    assert flops == per_token / forward["forward"] and passes == 1.0
    assert 0.26 < flops < 0.27  # the attention (saved) and the head (outside) are not


def test_a_described_gpu_takes_its_siblings_efficiency_and_is_removed_after() -> None:
    run = next(r for r in RUNS if r.hardware)
    name = as_ran.gpu_for(run).name
    assert name not in throughput.HBM_GBPS and as_ran.gpu_for(run).bf16_dense_tflops == 912.5
    with estimate_accuracy.constants(0.5, 100), as_ran.tables_for(run):
        assert throughput.MATMUL_EFFICIENCY[name] == 0.5  # the fit's trial value
        assert throughput.HBM_GBPS[name] == 2400.0
    assert name not in throughput.HBM_GBPS and name not in throughput.MATMUL_EFFICIENCY


def test_uncorrected_rows_plan_as_the_public_plan_does(rows: list[dict]) -> None:
    for r in rows:
        public = r["record"]["throughput"]["tokens_per_s"] / r["run"].gpu_count
        if not r["corrections"]:
            assert math.isclose(r["planned_tokens_per_s"], public, rel_tol=1e-12), r["run"].id
        assert r["uncorrected_ratio"] * r["run"].tokens_per_s_per_gpu == pytest.approx(
            public * (estimate_accuracy.COMPILE_SPEEDUP if r["run"].compiled else 1.0)
        )


def test_the_rows_outside_before_and_the_networks(rows: list[dict]) -> None:
    before = {r["run"].id: round(r["uncorrected_ratio"], 2) for r in rows}
    assert before["torchtitan-llama3.1-8b-h100-fsdp2-eager"] == 1.44
    assert before["torchtitan-llama3.1-8b-h100x128-fsdp2-eager"] == 1.5
    assert before["torchtitan-llama3-8b-a100x64-fsdp2-eager"] == 1.22
    for c in as_ran.CORRECTIONS:
        assert any(c.applies(run) for run in RUNS), c.key
    for run in RUNS:
        assert run.gpu_count % run.nodes == 0 and run.shape in SHAPES, run.id
    kempner = next(r for r in RUNS if r.id == "kempnerforge-13b-h200x8-fsdp2-eager")
    assert kempner.internode_gbps == NETWORK_GBPS["infiniband"]  # the planner's default
