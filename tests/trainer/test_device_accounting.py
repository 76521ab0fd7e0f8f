"""Per-GPU states count only tensors on the rank's device (veri_tui/trainer/measure.py `on_device`).

cpu_offload keeps shards, gradients and AdamW moments on the host; counting them as GPU states
made calibration's activation ratio (peak - states) negative or wrong. CPU has no second
device, so the split is shown with the meta device standing in for the accelerator: tensors
on meta are "on the GPU", CPU tensors are host-resident (real tensors, real optimizer states).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.supervise.jobstats import gather
from veri_tui.launch.calibrate import ratios_of
from veri_tui.trainer.measure import StateMeter, on_device, split_bytes
from veri_tui.trainer.report import RankContext
from veri_tui.trainer.runstats import RunStats

META = torch.device("meta")  # the stand-in accelerator


def _half_offloaded() -> tuple[nn.Module, torch.optim.Optimizer]:
    """Two bf16 linears: `dev` (3x4+4 = 16 params) on the 'GPU', `host` (8x2+2 = 18) on the
    host, each with a gradient and AdamW moments where its parameter lives."""
    model = nn.Module()
    model.dev = nn.Linear(3, 4, dtype=torch.bfloat16, device=META)
    model.host = nn.Linear(8, 2, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
        opt.state[p] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p),
                        "step": torch.tensor(1.0)}  # fmt: skip  # AdamW's host scalar
    return model, opt


def test_split_counts_each_tensor_where_it_lives() -> None:
    t_dev, t_host = torch.empty(5, dtype=torch.bfloat16, device=META), torch.empty(3)
    assert on_device(t_dev, torch.device("meta")) and not on_device(t_host, META)
    assert split_bytes([t_dev, t_host, None], META) == (10, 12)
    assert split_bytes([t_dev, t_host], torch.device("cpu")) == (12, 10)


def test_runstats_counts_host_resident_states_apart(tmp_path: Path) -> None:
    model, opt = _half_offloaded()
    stats = RunStats(RankContext(0, 0, 0, 1, tmp_path), META, zero_stage=3, offload=True)
    stats.after_update(model, opt, None)
    # On the device: 16 params x 2 bytes, as grads, and 2 moments; the 4 step scalars are host.
    assert stats.states == {"params": 32, "grads": 32, "optimizer": 64}
    assert stats.host_states == {"params": 36, "grads": 36, "optimizer": 72 + 16}
    # The same model on a CPU run: the meta half is off the device now, the CPU half on it.
    cpu = RunStats(RankContext(0, 0, 0, 1, tmp_path), torch.device("cpu"), zero_stage=3)
    cpu.after_update(*_half_offloaded(), None)
    assert cpu.states == {"params": 36, "grads": 36, "optimizer": 72 + 16}
    assert cpu.host_states == {"params": 32, "grads": 32, "optimizer": 64}


def test_runstats_record_says_what_was_offloaded(tmp_path: Path) -> None:
    model, opt = _half_offloaded()
    stats = RunStats(RankContext(0, 0, 0, 1, tmp_path), torch.device("cpu"), 3, offload=True)
    stats.after_update(model, opt, None)
    got = stats.record(final=True)
    assert got["offloaded"] is True and got["states_bytes"] == 36 + 36 + 88
    assert got["host_states_bytes"] == 32 + 32 + 64  # the meta ones, off the CPU "device"


def test_state_meter_keeps_host_bytes_out_of_the_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERI_MEASURE_STATES", "1")
    model, opt = _half_offloaded()
    (tmp_path / "measured").mkdir()
    meter = StateMeter(RankContext(0, 0, 0, 1, tmp_path), step=1, device=META)
    meter.after_backward(model, opt)
    rec = meter.write()
    assert (rec["params"], rec["grads"], rec["optimizer"], rec["total"]) == (32, 32, 64, 128)
    assert rec["host"] == {"params": 36, "grads": 36, "optimizer": 88}


def test_gather_and_calibration_leave_offloaded_activations_alone(tmp_path: Path) -> None:
    for rank, host in ((0, 900), (1, 1000)):
        path = tmp_path / "measured" / f"run-rank-{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {
            "device": "cuda", "final": True, "steps": 5, "steps_timed": 3, "warmup_steps": 2,
            "states_bytes": 40, "host_states_bytes": host, "offloaded": True,
            "peak_bytes": 500, "tokens_per_s": 100.0,
        })  # fmt: skip
    meas = gather(tmp_path, {"gpu": "H100-80GB"})
    assert meas is not None
    assert (meas["states_bytes"], meas["host_states_bytes"], meas["offloaded"]) == (40, 1000, True)
    pred = {"activations_model_bytes": 200, "tokens_per_s_model": 50.0}
    # Offloaded: the GPU's peak is activations + the units in flight, which the plan counts as
    # its states: no activation ratio, only the throughput folds.
    assert ratios_of({"predicted": pred, "measured": meas}) == {"efficiency": 2.0}
    plain = {**meas, "offloaded": False}
    assert ratios_of({"predicted": pred, "measured": plain}) == {
        "efficiency": 2.0, "activation": (500 - 40) / 200,
    }  # fmt: skip
