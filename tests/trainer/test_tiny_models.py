"""scripts/make_tiny_model.py rebuilds the bundled assets byte for byte (seeded, deterministic):
the tiny dense model, the tiny mixture of experts, and the datasets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from trainer_jobs import REPO


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_make_tiny_model_rebuilds_the_assets_byte_for_byte(tmp_path: Path) -> None:
    script = REPO / "scripts" / "make_tiny_model.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    for folder in ("tiny-model", "tiny-moe", "data"):
        bundled = sorted(p.name for p in (REPO / "assets" / folder).iterdir())
        assert bundled == sorted(p.name for p in (tmp_path / folder).iterdir()), folder
        for name in bundled:
            built = (tmp_path / folder / name).read_bytes()
            assert built == (REPO / "assets" / folder / name).read_bytes(), f"{folder}/{name}"
    assert (REPO / "assets" / "tiny-moe" / "model.safetensors").stat().st_size < 400_000
