"""Per-rank failure records from real 2-rank torchrun jobs (gloo).

A malformed data row fails on every rank with the customer's code; a checkpoint save that
raises DCP's CheckpointException (a BaseException) still leaves a record; a disk that fills
during a save is reported and cleaned. A missing weights file (every rank's own
MODEL_LOAD_ERROR) and an injected CUDA OOM (VERI_FAULT, the one thing mocked: blamed on the
rank that raised it, its peer marked a peer failure) are checked, the ranks' records and the
job's report together, by tests/launch/test_end_to_end.py through the supervisor.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from trainer_jobs import DATASETS, failure, run_trainer, write_job

from veri_tui.jobfolder.contract.status import ATTRIBUTION


def _elastic_error_files(job_dir: Path) -> list[Path]:
    return sorted((job_dir / "elastic").glob("*/attempt_*/*/error.json"))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_malformed_row_is_a_data_error_on_every_rank(tmp_path: Path) -> None:
    lines = DATASETS["text"].read_text().splitlines()
    lines[6] = '{"text": "unterminated'
    data = tmp_path / "broken.jsonl"
    data.write_text("\n".join(lines) + "\n")
    job = write_job(tmp_path / "job", dataset=data, max_steps=2)
    proc = run_trainer(job, 2)
    assert proc.returncode != 0
    for rank in (0, 1):
        rec = failure(tmp_path / "job", rank)
        assert rec["code"] == "DATA_ERROR" and ATTRIBUTION[rec["code"]] == "customer"
        assert rec["rank"] == rank and rec["local_rank"] == rank and rec["world_size"] == 2
        assert rec["message"].startswith(f"{data} line 7: not valid JSON")
        assert not rec["peer_failure"] and rec["time_ns"] > 10**18
        assert "DataError" in rec["traceback"]
    assert len(_elastic_error_files(tmp_path / "job")) == 2  # torch elastic's `record` too
    # Each rank checked its own rows of the file (veri_tui/trainer/dataprep.py); line 7 is rank 0's,
    # rank 1 raised the same error after the ranks compared. No cache is left half-made.
    assert not (tmp_path / "job" / "tokens").exists()
    assert not (tmp_path / "job" / "tokens.tmp").exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_checkpoint_exception_still_leaves_a_record(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", max_steps=4, checkpoint_steps=2)
    proc = run_trainer(job, 2, env={"VERI_FAULT": "ckpt_raise:0:2"})
    assert proc.returncode != 0
    rec = failure(tmp_path / "job", 0)
    assert rec["code"] == "UNKNOWN" and not rec["peer_failure"]
    assert rec["message"].startswith("checkpoint step-2 failed (")
    assert "bytes free on the checkpoint disk" in rec["message"]  # not full: it was injected
    assert "CheckpointException" in rec["traceback"]
    ckpts = tmp_path / "job" / "checkpoints"
    assert not (ckpts / "step-2").exists() and not (ckpts / "step-2.tmp").exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_out_of_disk_during_save_is_reported_and_cleaned(tmp_path: Path) -> None:
    """A 256 KiB tmpfs as the checkpoint folder: DCP fails (its errno is lost), the record
    says how much space is left, and no partial checkpoint stays behind."""
    job = write_job(tmp_path / "job", max_steps=3, checkpoint_steps=1)
    ckpts = tmp_path / "job" / "checkpoints"
    ckpts.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(ckpts)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        proc = run_trainer(job, 2)
        leftovers = list(ckpts.iterdir())
    finally:
        subprocess.run(["umount", str(ckpts)], check=True)
    assert proc.returncode != 0 and leftovers == []
    for rank in (0, 1):
        rec = failure(tmp_path / "job", rank)
        assert rec["message"].startswith("checkpoint step-1 failed (")
        assert f"on the checkpoint disk {ckpts}): CheckpointException: " in rec["message"]
    # Rank 0 looks before it removes the partial folder; other ranks may look after.
    assert "bytes free (full) on the checkpoint disk" in failure(tmp_path / "job", 0)["message"]
