"""Where a model's headers come from: a local folder, the local HF cache, or the Hub.

`read_model_info(model)` takes a folder (config.json + model.safetensors, or shards named by
model.safetensors.index.json) or a Hub id. A Hub id is looked up in the local cache first
(HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; refs/main names the
snapshot); only when the cache lacks it do we ask the Hub for the safetensors metadata,
and with HF_HUB_OFFLINE=1 or no connection that is a one-line error saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic_core import from_json

from veri_tui.bundled import bundled_model
from veri_tui.errors import Refusal, VeriError
from veri_tui.plan.headers import TensorInfo, parse_header, read_header
from veri_tui.plan.model_info import ModelInfo, build_model_info

INDEX_NAME = "model.safetensors.index.json"
# A pattern, not a compiled regex: re compiles it on the first Hub id (a folder needs none).
_HUB_ID = r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$"
# Config and index files are small; anything bigger is not what we think it is.
MAX_JSON_BYTES = 50_000_000


def bundled_tiny_model() -> Path:
    """The tiny model shipped as package data (used when no model is given)."""
    return bundled_model()


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise VeriError(Refusal(str(path), f"{what} is larger than {MAX_JSON_BYTES} bytes"))
        data = from_json(path.read_bytes())  # UTF-8 JSON, as headers.read_header reads it
    except FileNotFoundError:
        raise VeriError(Refusal(str(path), f"missing {what}")) from None
    except (OSError, ValueError) as exc:
        raise VeriError(Refusal(str(path), f"unreadable {what}: {exc}")) from None
    if not isinstance(data, dict):
        raise VeriError(Refusal(str(path), f"{what} is not a JSON object"))
    return data


def _weight_map(folder: Path) -> dict[str, Any] | None:
    """The index's tensor -> shard map, or None for a checkpoint without an index."""
    index = folder / INDEX_NAME
    if not index.exists():
        return None
    weight_map = _read_json(index, "safetensors index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise VeriError(Refusal(str(index), "no weight_map; re-download the model"))
    return weight_map


def _weight_files(folder: Path, weight_map: dict[str, Any] | None) -> list[Path]:
    """The safetensors files that make up the model, checked against the index if any."""
    index = folder / INDEX_NAME
    if weight_map is not None:
        names = sorted({str(v) for v in weight_map.values()})
        files = []
        for name in names:
            shard = folder / name
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise VeriError(Refusal(str(index), f"shard name {name!r} leaves the folder"))
            if not shard.is_file():
                msg = f"missing shard {name} named by {INDEX_NAME}; re-download the model"
                raise VeriError(Refusal(str(shard), msg))
            files.append(shard)
        return files
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    others = sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("adapter"))
    if others:
        return others
    raise VeriError(
        Refusal(
            str(folder),
            "no safetensors weights (model.safetensors or an index); "
            "veri-tui counts parameters from safetensors headers only",
        )
    )


def read_local(folder: Path, source: str | None = None) -> ModelInfo:
    """Model info of a local checkpoint folder."""
    if not folder.is_dir():
        raise VeriError(Refusal(str(folder), "not a folder with config.json + safetensors"))
    config = _read_json(folder / "config.json", "config.json")
    weight_map = _weight_map(folder)
    files = _weight_files(folder, weight_map)
    tensors: list[TensorInfo] = []
    for f in files:
        tensors.extend(read_header(f))
    if weight_map is not None:
        names = {t.name for t in tensors}
        missing = [k for k in weight_map if k not in names]
        if missing:
            shard = weight_map[missing[0]]
            msg = f"{INDEX_NAME} names {missing[0]} in it, but the header lacks it"
            raise VeriError(Refusal(str(folder / shard), msg))
    return build_model_info(
        source or str(folder),
        tensors,
        config,
        path=str(folder.resolve()),
        files=[f.name for f in files],
    )


def hub_cache_dir() -> Path:
    """The HF hub cache as huggingface_hub resolves it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot folder holding config.json + weights, or None."""
    repo = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / revision
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(repo / "snapshots" / ref.read_text().strip())
    elif (repo / "snapshots" / revision).is_dir():
        candidates.append(repo / "snapshots" / revision)
    elif (repo / "snapshots").is_dir() and revision == "main":
        # No ref (e.g. copied caches): the newest snapshot is the best guess.
        snaps = sorted((repo / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime)
        candidates.extend(reversed(snaps))
    for snap in candidates:
        has_weights = (snap / INDEX_NAME).exists() or any(snap.glob("*.safetensors"))
        if (snap / "config.json").is_file() and has_weights:
            return snap
    return None


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def read_hub(repo_id: str) -> ModelInfo:
    """Model info of a Hub repo from its safetensors metadata (header ranges only)."""
    if _offline():
        raise VeriError(
            Refusal(
                "model",
                f"{repo_id} is not in the local HF cache ({hub_cache_dir()}) and HF_HUB_OFFLINE "
                f"is set; run `hf download {repo_id}` online, or unset HF_HUB_OFFLINE",
            )
        )
    # Imported here: only this path needs it, and it is slow to import.
    from huggingface_hub import get_safetensors_metadata, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        meta = get_safetensors_metadata(repo_id)
        config = from_json(Path(hf_hub_download(repo_id, "config.json")).read_bytes())
    except HfHubHTTPError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VeriError(Refusal("model", f"{repo_id}: Hub refused: {first}")) from None
    except Exception as exc:  # noqa: BLE001
        # Connection errors (httpx's are not OSError), offline mode, odd metadata: one line.
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise VeriError(
            Refusal(
                "model",
                f"{repo_id}: cannot reach the Hub ({first}); connect, or download it into the "
                "local HF cache, or give a local folder",
            )
        ) from None
    tensors: list[TensorInfo] = []
    files = sorted(meta.files_metadata)
    for name in files:
        raw = {
            t: {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": list(i.data_offsets)}
            for t, i in meta.files_metadata[name].tensors.items()
        }
        tensors.extend(parse_header(raw, Path(f"{repo_id}/{name}"), None))
    return build_model_info(repo_id, tensors, config, path=None, files=files)


def read_model_info(model: str | None) -> ModelInfo:
    """Counts for a local folder or Hub id (None: the bundled tiny model)."""
    if model is None or model == "":
        folder = bundled_tiny_model()
        if not folder.is_dir():
            raise VeriError(
                Refusal("model", f"no model given and the bundled tiny model {folder} is missing")
            )
        return read_local(folder, "tiny-model (bundled)")
    path = Path(model).expanduser()
    if path.exists():
        return read_local(path, model)
    if not re.match(_HUB_ID, model) or model.startswith((".", "/", "~")):
        raise VeriError(Refusal("model", f"{model}: no such folder, and not a Hub id (org/name)"))
    snap = cached_snapshot(model)
    if snap is not None:
        return read_local(snap, model)
    return read_hub(model)
