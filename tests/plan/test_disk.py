"""The disk estimate (veri_tui/plan/disk.py): checkpoint and artifact bytes, how many
checkpoints exist at once, and where the plan shows them. Measured against real checkpoints
in tests/launch/test_disk_preflight.py."""

from __future__ import annotations

import pytest

from veri_tui.commands.plan import summary_lines
from veri_tui.plan import load_job_config, plan, plan_job
from veri_tui.plan.disk import (
    ENTRY_BYTES,
    FIXED_BYTES,
    TENSORS_PER_LAYER,
    DiskEstimate,
    estimate_disk,
    size,
)
from veri_tui.plan.model_info import ModelInfo


def est(info: ModelInfo, **kw) -> DiskEstimate:
    args = {
        "precision": "bf16",
        "lora_rank": 0,
        "checkpoint_steps": 10,
        "keep_checkpoints": 2,
        "max_steps": None,
        **kw,
    }
    return estimate_disk(info, **args)


def framing(info: ModelInfo) -> int:
    return 4 * (TENSORS_PER_LAYER * info.layer_count + 3) * ENTRY_BYTES + FIXED_BYTES


@pytest.mark.parametrize(("precision", "per_param"), [("bf16", 6), ("fp32", 12)])
def test_a_checkpoint_is_weights_and_two_moments(infos, precision: str, per_param: int) -> None:
    info = infos["llama-3.1-8b"]  # untied
    disk = est(info, precision=precision)
    n = info.parameter_count
    assert disk.checkpoint_bytes == per_param * n + framing(info)
    assert disk.checkpoint_bytes / (per_param * n) < 1.001  # framing is noise on a real model
    # The artifact: the weights once, in the trained dtype (no optimizer states).
    assert per_param // 3 * n < disk.artifact_bytes < per_param // 3 * n * 1.001


def test_tied_embeddings_are_saved_twice_by_dcp_and_once_in_the_artifact(infos) -> None:
    info = infos["qwen3-0.6b"]
    assert info.tied_embeddings
    untied = info._replace(tied_embeddings=False)
    assert est(info).checkpoint_bytes - est(untied).checkpoint_bytes == 2 * (
        info.embedding_parameters
    )
    assert est(info).artifact_bytes == est(untied).artifact_bytes


def test_lora_saves_only_the_adapter(infos) -> None:
    info = infos["llama-3.1-8b"]
    disk = est(info, lora_rank=16)
    adapter = info.adapter_parameters(16)
    tensors = 2 * info.lora_target_count
    # fp32 adapters (either precision): weight, m and v at 4 bytes each; the artifact 4.
    assert disk.checkpoint_bytes == 12 * adapter + 4 * tensors * ENTRY_BYTES + FIXED_BYTES
    assert disk.artifact_bytes < 4 * adapter * 1.01
    assert disk.checkpoint_bytes < est(info).checkpoint_bytes / 50


def test_dpo_and_stage_do_not_change_what_is_saved(infos) -> None:
    # The reference model is never checkpointed; sharding changes who writes, not how much.
    path = str(infos["qwen3-0.6b"].path)
    one = plan_job(load_job_config(None, model=path, sets=["checkpoint_steps=5"]))
    dpo = plan_job(load_job_config(None, model=path, method="dpo", sets=["checkpoint_steps=5"]))
    z3 = plan_job(
        load_job_config(None, model=path, gpu_count=4, sets=["checkpoint_steps=5", "zero_stage=3"])
    )
    assert one.disk == dpo.disk == z3.disk


@pytest.mark.parametrize(
    ("checkpoint_steps", "keep", "max_steps", "count"),
    [
        (None, 2, None, 0),  # no checkpoints at all
        (10, 2, None, 3),  # steps unknown (epochs): the kept two + the one being written
        (10, 2, 1000, 3),
        (10, 5, 20, 2),  # only two are ever written
        (10, 2, 5, 0),  # none is
        (1, 1, 100, 2),
    ],
)
def test_checkpoints_at_once(infos, checkpoint_steps, keep, max_steps, count) -> None:
    disk = est(
        infos["qwen3-0.6b"],
        checkpoint_steps=checkpoint_steps,
        keep_checkpoints=keep,
        max_steps=max_steps,
    )
    assert disk.checkpoints == count
    assert disk.total_bytes == count * disk.checkpoint_bytes + disk.artifact_bytes


def test_the_plan_shows_it_after_the_plan_line_and_in_json() -> None:
    rec = plan(checkpoint_steps=10, keep_checkpoints=3, max_steps=100)
    assert not any(ln.startswith("disk: ") for ln in rec.header_lines)  # the log's header
    lines = summary_lines(rec)
    disk = next(ln for ln in lines if ln.startswith("disk: "))
    assert lines[lines.index(disk) + 1].startswith("cost: ")
    d = rec.disk
    assert disk == (
        f"disk: {size(d.total_bytes)} = 4 checkpoints x {size(d.checkpoint_bytes)} + artifact "
        f"{size(d.artifact_bytes)} (keep_checkpoints=3, +1 while the next is written)"
    )
    js = rec.to_dict()["disk"]
    assert js["checkpoints"] == 4 and js["total_bytes"] == d.total_bytes
    assert set(js) >= {"checkpoint_bytes", "artifact_bytes", "why"}
    assert "(no checkpoints: checkpoint_steps unset)" in plan().disk.line()


def test_sizes_read_in_the_unit_that_fits() -> None:
    assert [size(n) for n in (512, 336_177, 1_200_192, 16_066_560_000)] == [
        "0.5 KB",
        "336.2 KB",
        "1.2 MB",
        "16.1 GB",
    ]
