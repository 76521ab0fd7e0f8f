"""Checkpoint commit and resume on 2 CPU ranks, zero_stage 3 (sharded DCP checkpoints).

A rank SIGKILLed during the save of step 16 (after the checkpoint data is written, before
the commit: VERI_FAULT=ckpt_kill) must leave step-8 complete, verifiable and loadable and
no `step-16` folder; resuming must then give exactly the losses of an uninterrupted run.
The uninterrupted run also shows the tiny model learning: its loss halves within 32 steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from trainer_jobs import checkpoint_tensors, failure, metrics, run_trainer, write_job

from veri_tui.trainer.checkpoint import committed_steps, verify

HP = {"zero_stage": 3, "micro_batch_size": 2, "max_steps": 32, "checkpoint_steps": 8}


@pytest.mark.slow
@pytest.mark.trial
@pytest.mark.timeout(300)
def test_kill_during_save_keeps_previous_checkpoint_and_resume_matches(tmp_path: Path) -> None:
    straight = write_job(tmp_path / "straight", **HP)
    proc = run_trainer(straight, 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = metrics(tmp_path / "straight")
    assert len(want) == 32 and want[-1]["loss"] <= want[0]["loss"] / 2  # visibly learns
    # keep_checkpoints=2: only the newest two committed steps stay.
    assert committed_steps(tmp_path / "straight" / "checkpoints") == [24, 32]

    job = write_job(tmp_path / "killed", **HP)
    proc = run_trainer(job, 2, env={"VERI_FAULT": "ckpt_kill:1:16"})
    assert proc.returncode != 0
    ckpts = tmp_path / "killed" / "checkpoints"
    assert committed_steps(ckpts) == [8]
    assert not (ckpts / "step-16").exists()
    assert (ckpts / "step-16.tmp").exists()  # the partial save stays aside, never committed
    assert verify(ckpts / "step-8")
    state = json.loads((ckpts / "step-8" / "trainer_state.json").read_text())
    assert state["step"] == 8 and state["data_position"] == 8
    tensors = checkpoint_tensors(ckpts / "step-8")
    assert tensors["lm_head.weight"].shape == (448, 64)
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())
    # Rank 1 died by signal: no record of its own; rank 0 only saw its peer vanish.
    assert failure(tmp_path / "killed", 1) is None
    peer = failure(tmp_path / "killed", 0)
    assert peer is None or (peer["peer_failure"] and peer["code"] == "COMM_ERROR")
    assert [m["step"] for m in metrics(tmp_path / "killed")] == list(range(1, 17))

    spec = json.loads(job.read_text())
    spec["spec"]["hyperparameters"]["resume"] = True
    job.write_text(json.dumps(spec))
    proc = run_trainer(job, 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resume: from checkpoint step-8" in (tmp_path / "killed" / "log.txt").read_text()
    assert not (ckpts / "step-16.tmp").exists()
    got = metrics(tmp_path / "killed")  # steps 9-16 of the killed run were dropped on resume
    assert [m["step"] for m in got] == list(range(1, 33))
    assert [m["loss"] for m in got[:8]] == [m["loss"] for m in want[:8]]
    got = got[8:]
    assert [m["loss"] for m in got] == [m["loss"] for m in want[8:]]
    assert [m["grad_norm"] for m in got] == [m["grad_norm"] for m in want[8:]]
