"""Where the bundled tiny models, datasets and example jobs live, as installed.

They are package data of `veri_tui` (veri_tui/assets/, listed in pyproject.toml's
package-data), found through importlib.resources so that a wheel installed without `-e`
finds them in site-packages exactly as a source checkout finds them in the repository (whose
top-level `assets` is a link to the same folder, for the paths the docs show). This module
imports only the standard library: the app's first frame and the planning core both read it.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def assets_dir() -> Path:
    """The folder of bundled assets (tiny-model/, tiny-moe/, data/, examples/)."""
    # files() of a package installed as plain files (a wheel, an editable install, a
    # checkout on sys.path) is a real path; veri-tui is never run from a zip.
    return Path(str(files("veri_tui").joinpath("assets")))


def bundled_model() -> Path:
    """The bundled tiny model: what plan, the app and launch use when no model is given."""
    return assets_dir() / "tiny-model"


def bundled_moe() -> Path:
    """The bundled tiny mixture of experts (Qwen3-MoE: 8 routed experts, 2 per token)."""
    return assets_dir() / "tiny-moe"


def bundled_dataset(name: str) -> Path:
    """A bundled dataset file by name, e.g. ``sft.jsonl``."""
    return assets_dir() / "data" / name
