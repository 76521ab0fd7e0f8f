"""Find a model on the remote host and count its parameters from safetensors headers over SFTP.

Only the 8-byte header length and the header itself are read (bounded by safetensors' own
100,000,000-byte limit), never tensor data, so counting a 70B checkpoint costs a few hundred KB
of transfer. The same checks as for local files apply (veri_tui.plan.headers).
"""

from __future__ import annotations

import posixpath
from typing import Any

import paramiko

from veri_tui.errors import VeriError
from veri_tui.launch.ssh import files


def expand_home(path: str, home: str) -> str:
    """`~` and `~/x` mean the remote user's home; other paths are taken as they are."""
    if path == "~" or path.startswith("~/"):
        return posixpath.join(home, path[2:]) if len(path) > 1 else home
    return path


def locate_model(sftp: paramiko.SFTPClient, model: str, home: str) -> str | None:
    """The remote checkpoint folder for `model`: a path, or a Hub id in the remote HF cache."""
    path = expand_home(model, home)
    if path.startswith("/") and files.exists(sftp, posixpath.join(path, "config.json")):
        return path
    parts = model.split("/")
    if len(parts) != 2 or model.startswith(("/", "~", ".")):
        return None
    repo = posixpath.join(home, ".cache/huggingface/hub", f"models--{parts[0]}--{parts[1]}")
    try:
        ref = files.read_bytes(sftp, posixpath.join(repo, "refs", "main"), 100).decode().strip()
        candidates = [ref]
    except (FileNotFoundError, UnicodeDecodeError):
        try:
            candidates = sorted(sftp.listdir(posixpath.join(repo, "snapshots")))
        except FileNotFoundError:
            return None
    for rev in candidates:
        snap = posixpath.join(repo, "snapshots", rev)
        if files.exists(sftp, posixpath.join(snap, "config.json")):
            return snap
    return None


def _weight_files(sftp: paramiko.SFTPClient, folder: str) -> list[str]:
    index = posixpath.join(folder, "model.safetensors.index.json")
    if files.exists(sftp, index):
        weight_map = files.read_json(sftp, index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise VeriError("no weight_map object; re-download the model", key=index)
        return [posixpath.join(folder, f) for f in sorted(set(weight_map.values()))]
    single = posixpath.join(folder, "model.safetensors")
    if files.exists(sftp, single):
        return [single]
    found = sorted(f for f in sftp.listdir(folder) if f.endswith(".safetensors"))
    if not found:
        raise VeriError(f"{folder}: no safetensors files on the remote host", key="model")
    return [posixpath.join(folder, f) for f in found]


class RemotePath:
    """Just enough of pathlib.Path (`stat`, `open`, `str`) for plan.headers.read_header.

    Reusing the local reader keeps one implementation of safetensors' checks; it reads the
    8-byte length and the bounded header through SFTP exactly as it would from a disk.
    """

    def __init__(self, sftp: paramiko.SFTPClient, path: str) -> None:
        self.sftp = sftp
        self.path = path

    def stat(self) -> paramiko.SFTPAttributes:
        return self.sftp.stat(self.path)

    def open(self, mode: str = "rb") -> paramiko.SFTPFile:
        return self.sftp.open(self.path, mode)

    def __str__(self) -> str:
        return self.path

    def __fspath__(self) -> str:
        return self.path


def read_remote_header(sftp: paramiko.SFTPClient, path: str) -> list[Any]:
    """The tensors of one remote safetensors file, reading only its header."""
    from veri_tui.plan.headers import read_header

    return read_header(RemotePath(sftp, path))  # type: ignore[arg-type]


def remote_model_info(sftp: paramiko.SFTPClient, model: str, folder: str) -> Any:
    """A veri_tui.plan ModelInfo for the checkpoint at remote `folder` (path = that folder)."""
    from veri_tui.plan.model_info import build_model_info

    config = files.read_json(sftp, posixpath.join(folder, "config.json"))
    weights = _weight_files(sftp, folder)
    tensors = [t for f in weights for t in read_remote_header(sftp, f)]
    info = build_model_info(model, tensors, config, path=folder, files=weights)
    info_bytes = sum(sftp.stat(f).st_size or 0 for f in weights)
    return info, info_bytes
