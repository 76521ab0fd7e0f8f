"""Fixtures for the planning-core tests: header-only checkpoints shaped like public models.

Checkpoints are written once per session (sparse files, kilobytes on disk) and shared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.synthetic import (
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    MISTRAL_7B_V0_1,
    QWEN2_5_7B,
    QWEN3_0_6B,
    write_checkpoint,
)

from veri_tui.plan import read_model_info
from veri_tui.plan.model_info import ModelInfo

MODELS = {
    "qwen3-0.6b": (QWEN3_0_6B, 1),
    "llama-3.1-8b": (LLAMA_3_1_8B, 4),
    "mistral-7b": (MISTRAL_7B_V0_1, 2),
    "qwen2.5-7b": (QWEN2_5_7B, 4),
    "llama-3.1-70b": (LLAMA_3_1_70B, 30),
}


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folder per model name, each a header-only checkpoint."""
    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, (config, shards) in MODELS.items():
        write_checkpoint(root / name, config, shards=shards)
        out[name] = root / name
    return out


@pytest.fixture(scope="session")
def infos(model_dirs: dict[str, Path]) -> dict[str, ModelInfo]:
    """ModelInfo per model name, read from the headers."""
    return {name: read_model_info(str(path)) for name, path in model_dirs.items()}


@pytest.fixture(autouse=True)
def _private_veri_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans with a dataset cache its token count under $VERI_HOME/cache: never the user's."""
    monkeypatch.setenv("VERI_HOME", str(tmp_path / "veri-home"))
