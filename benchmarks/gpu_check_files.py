"""The GPU check's files on the GPU machine: datasets, carried wheels, and what comes back.

Stdlib only (the GPU machine has no veri-tui dependencies beyond torch and Hugging Face's):

- datasets: text rows longer than the run's sequence (the trainer truncates) and DPO triples;
- wheels: the prepared folder's wheels/*.whl (bitsandbytes for QLoRA, `--prepare --wheel`)
  are unpacked with zipfile into the work folder's site/ (a wheel is a zip; no pip needed
  there), which the jobs get on PYTHONPATH; `importable` asks a child Python, so this
  process never imports torch or CUDA;
- results: each job's log.txt, torchrun.log, supervisor.log, job.json, failure records
  (also of archived attempts), elastic error files and measured files are copied into a
  staging folder's runs/<name>/ (outside $OUT: gpu_check_out.pack puts them all in one
  archive there), each at most LOG_CAP bytes (the tail).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

LOG_CAP = 2_000_000  # bytes kept of each file brought back (its tail)
KEEP = ("log.txt", "torchrun.log", "supervisor.log", "job.json", "metrics.jsonl")
KEEP_GLOBS = ("failures/*.json", "measured/*.json", "measured/*.jsonl",
              "elastic/*/attempt_*/*/error.json", "attempts/*/failures/*.json",
              "attempts/*/torchrun.log")  # fmt: skip


def build_text(path: Path, rows: int, seq: int) -> None:
    """Text rows longer than `seq` tokens of the bundled tokenizer (the trainer truncates)."""
    words = "the cat lives in the barn and the owl lives in the forest".split()
    line = " ".join(words[i % len(words)] + str(i % 97) for i in range(seq * 2))
    with open(path, "w", encoding="utf-8") as fh:
        for r in range(rows):
            fh.write(json.dumps({"text": f"row {r}: {line}"}) + "\n")


def build_dpo(path: Path, rows: int, seq: int) -> None:
    """DPO triples whose prompt takes about half of `seq` tokens of the bundled tokenizer
    and each answer more than the rest (the trainer truncates the answers, never the whole
    answer: a prompt past max_length is a DATA_ERROR)."""
    words = "which animal lives in the barn and which one in the forest".split()
    prompt = " ".join(words[i % len(words)] for i in range(seq // 4))
    with open(path, "w", encoding="utf-8") as fh:
        for r in range(rows):
            row = {"prompt": f"{r}: {prompt}?", "chosen": " the owl" * seq,
                   "rejected": " the cat" * seq}  # fmt: skip
            fh.write(json.dumps(row) + "\n")


def build_datasets(work: Path, runs: list[dict]) -> None:
    """Every dataset the runs name (`data`: kind and seq), rows for every step of the largest."""
    need: dict[tuple[str, int], int] = {}
    for r in runs:
        key = (r["data"]["kind"], r["data"]["seq"])
        rows = r["micro_batch_size"] * r["gpu_count"] * (r["steps"] + 1)
        need[key] = max(need.get(key, 0), rows)
    for (kind, seq), rows in need.items():
        build = build_dpo if kind == "dpo" else build_text
        build(work / f"{kind}-{seq}.jsonl", rows, seq)


def unpack_wheels(prep: Path, work: Path) -> Path | None:
    """DIR/wheels/*.whl unpacked into work/site; None when none was carried (the QLoRA run
    is then reported as not judged)."""
    wheels = sorted((prep / "wheels").glob("*.whl"))
    if not wheels:
        return None
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(site)
        except (OSError, zipfile.BadZipFile) as exc:  # its runs are then not judged, named
            print(f"wheel {wheel.name}: not unpacked ({exc})", flush=True)
    return site


def importable(module: str, pythonpath: str) -> tuple[bool, str]:
    """Whether a child Python with `pythonpath` imports `module`; (False, its last line)."""
    env = {**os.environ, "PYTHONPATH": pythonpath}
    try:
        proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                              text=True, timeout=120, env=env, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return False, f"import {module} took over 120 s"
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return proc.returncode == 0, last


def _tail_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    size = src.stat().st_size
    if size <= LOG_CAP:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as fh:
        fh.seek(size - LOG_CAP)
        dst.write_bytes(b"[... %d bytes cut ...]\n" % (size - LOG_CAP) + fh.read())


def bring_back(job_dir: Path, staging: Path, name: str) -> list[str]:
    """Copy the job's logs and records into staging/runs/<name>/; the paths copied (as the
    archive names them)."""
    if not job_dir.is_dir():
        return []
    dest, copied = staging / "runs" / name, []
    paths = [job_dir / k for k in KEEP] + [p for g in KEEP_GLOBS for p in job_dir.glob(g)]
    for src in paths:
        if src.is_file():
            rel = src.relative_to(job_dir)
            _tail_copy(src, dest / rel)
            copied.append(str(Path("runs") / name / rel))
    return copied
