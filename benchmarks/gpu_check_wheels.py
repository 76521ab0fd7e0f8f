"""The GPU check's carried wheels: bitsandbytes for the QLoRA run, fetched by `--prepare`.

The GPU machine has no bitsandbytes and reaches no registry, so `--prepare` (here) fetches
the pinned wheel with pip (`pip download`, for the GPU image's CPython 3.12 on x86-64 Linux),
keeps it in benchmarks/wheels/ (git-ignored: fetched once) and copies it into the prepared
folder, which travels with the tree. Where no registry answers, it says so and the QLoRA run
is reported there as not judged, never failed.

The copy in the prepared folder is the wheel's files without the native libraries of other
CUDA majors and of ROCm and XPU (43 MB -> 8 MB for 0.50.2): the image's torch is
2.11+cu130, whose CUDA 13 library bitsandbytes loads, and the device tool carries at most
64 MiB of tree. The GPU machine unpacks it with zipfile (benchmarks/gpu_check_files.py), as
it would the wheel.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

#: The QLoRA run's wheel: a py3-none manylinux wheel with CUDA 13 libraries, needing only
#: torch, numpy and packaging (all on the GPU image).
BITSANDBYTES = "bitsandbytes==0.50.2"
#: What the GPU image's python is (KINDS.md: CPython 3.12, x86-64 Linux).
TARGET = ("--python-version", "3.12", "--implementation", "cp", "--platform",
          "manylinux_2_28_x86_64", "--platform", "manylinux_2_24_x86_64", "--platform",
          "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64")  # fmt: skip
FETCH_TIMEOUT_S = 300.0
#: Native libraries kept: the CPU one and CUDA 13's (the image's torch is cu130).
KEEP_LIB = re.compile(r"libbitsandbytes_(cpu|cuda13\d)\.(so|dll|dylib)$")


def fetch(cache: Path, spec: str = BITSANDBYTES) -> tuple[Path | None, str]:
    """The wheel of `spec` in `cache` (fetched with `pip download` unless already there);
    (None, why not) when pip could not get it (no registry: one line saying so)."""
    name = spec.split("==")[0]
    version = spec.split("==")[1] if "==" in spec else ""
    found = sorted(cache.glob(f"{name}-{version}*.whl"))
    if found:
        return found[-1], f"{found[-1].name} (kept in {cache})"
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           *TARGET, "-d", str(cache), spec]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"not fetched: pip download {spec}: {type(exc).__name__}"
    found = sorted(cache.glob(f"{name}-{version}*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"not fetched: pip download {spec} found no registry or wheel ({last})"
    return found[-1], f"{found[-1].name} (fetched with pip download)"


def slim(wheel: Path, folder: Path) -> Path:
    """`folder/<wheel's name>`: the wheel's files less the native libraries `KEEP_LIB` does not
    keep (module docstring); written complete or not at all."""
    dest = folder / wheel.name
    tmp = dest.with_name(dest.name + ".tmp")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            base = item.filename.rsplit("/", 1)[-1]
            if base.startswith("libbitsandbytes_") and not KEEP_LIB.search(base):
                continue
            out.writestr(item, src.read(item))
    tmp.replace(dest)
    return dest
