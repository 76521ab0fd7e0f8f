"""The fake-CUDA harness itself (veri_tui/trainer/fakecuda, docs/trace.md): the device it
installs works and leaves nothing behind, a device mismatch raises with its op named, any
torch but the pinned one is refused, and a traced step of a Qwen3-0.6B-wide model on 4
fake ranks counts what the parameter arithmetic says, exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from support.fakecuda import checkpoint, job_spec, traced, write_job
from support.synthetic import QWEN3_0_6B
from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError

from veri_tui.trainer.fakecuda import device, runtime
from veri_tui.trainer.fakecuda.__main__ import main
from veri_tui.trainer.fakecuda.tracker import ROUND, Tracker
from veri_tui.trainer.weights import checkpoint_entries

RANKS = 4


def test_the_device_works_inside_and_is_gone_after() -> None:
    """Inside: a CUDA linear trains (backward's streams and contexts answered), a CUDA tensor
    meeting a host one raises naming the op. After: no accelerator, no CUDA, CPU training."""
    assert torch.accelerator.current_accelerator() is None
    with device.installed(), runtime.patched(8, "test GPU"), runtime.Mode(), Tracker():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 8
        # A Hopper (transformers asks before taking grouped GEMMs for MoE experts).
        assert torch.cuda.get_device_capability() == (9, 0)
        assert torch.cuda.get_device_properties(0).total_memory == 81559 << 20
        layer = torch.nn.Linear(8, 8, device="cuda")
        layer(torch.empty(2, 8, device="cuda")).sum().backward()
        assert layer.weight.grad is not None and layer.weight.grad.device.type == "cuda"
        with pytest.raises(FakeTensorDeviceMismatchError, match="cuda:0 and cpu") as exc:
            torch.empty(2, device="cuda") + torch.empty(2)
        assert "raised by aten.add.Tensor" in " ".join(getattr(exc.value, "__notes__", []))
    assert torch.accelerator.current_accelerator() is None and not torch.cuda.is_available()
    with pytest.raises((AssertionError, RuntimeError)):
        torch.empty(1, device="cuda")
    w = torch.ones(2, 2, requires_grad=True)
    (w @ w).sum().backward()
    assert w.grad is not None and w.grad.tolist() == [[4.0, 4.0], [4.0, 4.0]]


def test_another_torch_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch, "__version__", "2.12.0+cpu")
    with pytest.raises(device.FakeCudaError, match=r"tested on torch 2\.13\.0 only"):
        device.check_torch()
    job = write_job(tmp_path, job_spec(tmp_path, RANKS))
    assert main(["--job", str(job)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: torch 2.12.0+cpu:"), err


def _shards(model: Path, ranks: int) -> list[int]:
    """Each tensor's elements in rank 0's FSDP2 shard (dim 0 in torch.chunk pieces:
    ceil(rows / ranks) rows)."""
    return [
        -(-e.shape[0] // ranks) * math.prod(e.shape[1:]) for e in checkpoint_entries(model).values()
    ]


def test_a_traced_step_counts_the_parameter_arithmetic(tmp_path: Path) -> None:
    """zero_stage 3, bf16 on 4 ranks: AdamW's two bf16 moments are two shards of every
    parameter in 512-byte blocks, the checkpoint plans the shards, the moments and a
    float32 step per parameter, and nothing is misplaced."""
    model = checkpoint(tmp_path / "qwen3", QWEN3_0_6B, layers=2)
    run = traced(model, RANKS, tmp_path / "job")
    summary = run.summary()
    assert summary["placement"] == [] and summary["ranks"] == RANKS
    shards = _shards(model, RANKS)
    blocks = sum(-(-2 * n // ROUND) * ROUND for n in shards)
    assert summary["peak_by_holder"]["optimizer"] == 2 * blocks
    # The state dict names the tied embedding twice (embed_tokens, lm_head): both planned.
    embedding = -(-QWEN3_0_6B["vocab_size"] // RANKS) * QWEN3_0_6B["hidden_size"]
    assert summary["checkpoint_bytes"] == 2 * (3 * sum(shards) + embedding) + 4 * len(shards)
    assert summary["attention_kernels"] == {"flash": 2 * 2}  # 2 layers x 2 steps, no eval
    phases = summary["phases"]
    assert set(phases) == {"load", "forward", "backward", "optimizer step", "checkpoint"}
    assert summary["peak_allocated_bytes"] == max(
        p["peak_allocated_bytes"] for p in phases.values()
    )
    assert 0 < phases["forward"]["flops"] < phases["backward"]["flops"]
