"""SFTP helpers: bounded reads, atomic writes, folder uploads; every path is remote.

Writes go to a hidden temporary name and are moved into place with `posix_rename` (plain SFTP
`rename` refuses an existing target; field notes), so a reader on the remote side never sees a
half-written file. Reads are bounded so a huge or hostile file cannot exhaust memory.
"""

from __future__ import annotations

import importlib.util
import json
import posixpath
import secrets
import stat
from pathlib import Path
from typing import Any

import paramiko

from veri_tui.errors import VeriError

MAX_JSON_BYTES = 16 * 2**20


def exists(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        sftp.stat(path)
    except FileNotFoundError:
        return False
    return True


def is_dir(sftp: paramiko.SFTPClient, path: str) -> bool:
    try:
        return stat.S_ISDIR(sftp.stat(path).st_mode or 0)
    except FileNotFoundError:
        return False


def makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
    """`mkdir -p` over SFTP."""
    parts = []
    while path not in ("", "/") and not is_dir(sftp, path):
        parts.append(path)
        path = posixpath.dirname(path)
    for part in reversed(parts):
        try:
            sftp.mkdir(part)
        except OSError:
            # SFTP says only "Failure" for an existing folder: another writer (a second node
            # on a shared home, started in parallel) may have just made it. Only a folder
            # that still is not there is an error.
            if not is_dir(sftp, part):
                raise


def read_bytes(sftp: paramiko.SFTPClient, path: str, limit: int, offset: int = 0) -> bytes:
    """At most `limit` bytes from `offset`; FileNotFoundError passes through."""
    with sftp.open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read(limit)


def read_json(sftp: paramiko.SFTPClient, path: str) -> Any:
    """A remote JSON file (bounded); VeriError naming the file when it is not JSON."""
    raw = read_bytes(sftp, path, MAX_JSON_BYTES)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise VeriError(f"not readable JSON on the remote host ({exc})", key=path) from exc


def write_atomic(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int = 0o644) -> None:
    """Write `data` aside, then `posix_rename` it over `path`."""
    tmp = posixpath.join(
        posixpath.dirname(path), f".{posixpath.basename(path)}.{secrets.token_hex(4)}"
    )
    try:
        with sftp.open(tmp, "wb") as fh:
            fh.set_pipelined(True)
            fh.write(data)
        sftp.chmod(tmp, mode)
        sftp.posix_rename(tmp, path)
    except BaseException:
        try:
            sftp.remove(tmp)
        except OSError:
            pass
        raise


def upload_file(sftp: paramiko.SFTPClient, local: Path, remote: str) -> None:
    """Stream a local file to `remote` through a temporary name."""
    tmp = posixpath.join(posixpath.dirname(remote), f".{posixpath.basename(remote)}.part")
    try:
        sftp.put(str(local), tmp, confirm=True)
        sftp.posix_rename(tmp, remote)
    except OSError as exc:
        raise VeriError(f"upload to {remote} failed ({exc})", key=str(local)) from exc


#: The code a job's host runs, copied into its folder's pkg/ (on PYTHONPATH there): the rank
#: program and the job folder's package (its supervisor), under veri_tui/ as installed here.
UPLOADED = ("veri_tui.trainer", "veri_tui.jobfolder")


def package_dir(name: str) -> Path:
    """The folder of the installed package ``name`` (`veri_tui.trainer`...)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise VeriError(f"the bundled {name} package is not installed here", key="trainer")
    return Path(next(iter(spec.submodule_search_locations)))


def upload_code(
    sftp: paramiko.SFTPClient, pkg: str, packages: tuple[str, ...] = UPLOADED
) -> list[str]:
    """``packages`` (dotted names under veri_tui) and veri_tui's own `__init__.py` copied under
    the folder ``pkg`` (`pkg/veri_tui/...`), so `PYTHONPATH=pkg` imports them by their
    names; returns the files written."""
    top = package_dir("veri_tui")
    makedirs(sftp, posixpath.join(pkg, "veri_tui"))
    init = posixpath.join(pkg, "veri_tui", "__init__.py")
    write_atomic(sftp, init, (top / "__init__.py").read_bytes())
    done = [init]
    for name in packages:
        there = posixpath.join(pkg, *name.split("."))
        done += upload_package(sftp, package_dir(name), there)
    return done


def upload_package(sftp: paramiko.SFTPClient, package: Path, remote: str) -> list[str]:
    """Copy every .py file of a local package (recursively) under `remote`; returns them."""
    done = []
    for src in sorted(package.rglob("*.py")):
        if "__pycache__" in src.parts:
            continue
        dest = posixpath.join(remote, *src.relative_to(package).parts)
        makedirs(sftp, posixpath.dirname(dest))
        write_atomic(sftp, dest, src.read_bytes())
        done.append(dest)
    return done
