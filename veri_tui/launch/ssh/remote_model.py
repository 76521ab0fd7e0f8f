"""Find a model on the remote host and count its parameters from safetensors headers over SFTP.

Only the 8-byte header length and the header itself are read (bounded by safetensors' own
100,000,000-byte limit), never tensor data, so counting a 70B checkpoint costs a few hundred KB
of transfer. The same checks as for local files apply (veri_tui.plan.headers).

A Hub id is looked up in the host's Hub cache, found as huggingface_hub finds it
(`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`) from the environment of
the user's login shell there: what sshd sets (`SetEnv`, `~/.ssh/environment`) and what the
profile files export.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

import paramiko

from veri_tui.errors import VeriError
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection

#: The variables huggingface_hub reads for its cache, newest name first.
HUB_CACHE_VARS = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def expand_home(path: str, home: str) -> str:
    """`~` and `~/x` mean the remote user's home; other paths are taken as they are."""
    if path == "~" or path.startswith("~/"):
        return posixpath.join(home, path[2:]) if len(path) > 1 else home
    return path


def is_hub_id(model: str) -> bool:
    """`org/name`: what is looked up in the Hub cache when it is no folder on the host."""
    return len(model.split("/")) == 2 and not model.startswith(("/", "~", "."))


def hub_cache_dir(env: Mapping[str, str], home: str) -> str:
    """The Hub cache folder huggingface_hub would use with ``env`` and home folder ``home``."""

    def path(name: str) -> str | None:
        value = env.get(name, "").strip()
        return expand_home(value, home) if value else None

    hf_home = path("HF_HOME") or posixpath.join(
        path("XDG_CACHE_HOME") or posixpath.join(home, ".cache"), "huggingface"
    )
    return path("HF_HUB_CACHE") or path("HUGGINGFACE_HUB_CACHE") or posixpath.join(hf_home, "hub")


def remote_hub_cache(conn: Connection, home: str) -> str:
    """The host's Hub cache folder, from its login shell's environment (`env` there, so it
    does not matter which shell the user has); the default one if that cannot be run."""
    res = conn.run_line('"$SHELL" -lc env', timeout=30)  # $SHELL: expanded by the host
    env: dict[str, str] = {}
    if res.exit_status == 0:
        for line in res.stdout.decode("utf-8", "replace").splitlines():
            name, eq, value = line.partition("=")
            if eq and name in HUB_CACHE_VARS:
                env[name] = value
    return hub_cache_dir(env, home)


def locate_model(
    sftp: paramiko.SFTPClient, model: str, home: str, hub_cache: str | None = None
) -> str | None:
    """The remote checkpoint folder for `model`: a path, or a Hub id in the remote HF cache
    (``hub_cache``, by default `~/.cache/huggingface/hub`; `remote_hub_cache` finds it)."""
    path = expand_home(model, home)
    if path.startswith("/") and files.exists(sftp, posixpath.join(path, "config.json")):
        return path
    if not is_hub_id(model):
        return None
    org, name = model.split("/")
    cache = hub_cache or hub_cache_dir({}, home)
    repo = posixpath.join(cache, f"models--{org}--{name}")
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
