"""`veri-tui export JOB [--merge] [--push-to-hub REPO]`: a finished job's artifact as a
model folder to serve or share (docs/export.md).

A LoRA job exports its adapter, or with --merge the base with the adapter merged in
(veri_tui/trainer/merge.py); a full fine-tune exports its checkpoint (--merge has nothing to do:
one line says so). The torch work (the merge, the smoke generation) runs as `python -m
veri_tui.trainer.export` (veri_tui/trainer/export.py) with this interpreter: the launcher imports no
torch. The artifact is checked against its manifest first; the export is written aside
(`.<name>.tmp`) and renamed into place, with the smoke generation (smoke.json), the model
card (README.md) and its own manifest, so a failed export leaves no half-written folder.
A job that ran over SSH keeps its artifact on its host: one line says how to bring its
folder here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.contract.layout import OUTPUT
from veri_tui.launch import jobs

#: Files of an adapter or model folder that the export writes anew (or leaves out).
REWRITTEN = ("README.md", "manifest.json")
ADAPTER_CONFIG = "adapter_config.json"


def _artifact(rec: Mapping[str, Any], job_dir: Path) -> Path:
    """The job's artifact folder on this machine, checked against its manifest."""
    job_id = rec.get("job_id")
    if rec.get("status") != "succeeded":
        raise VeriError(f"job {job_id} is {rec.get('status')}: only a succeeded job has an "
                        f"artifact to export (`veri-tui jobs {job_id}`)", key="export")  # fmt: skip
    spec = rec.get("spec") or {}
    out = Path(str(spec.get("output_dir") or ""))
    folder = out if out.is_dir() else job_dir / OUTPUT
    problems = manifest.problems(folder)
    if problems:
        raise VeriError(f"the artifact is not whole: {problems[0]}", key="export")
    return folder


def _base(spec: Mapping[str, Any], given: str | None) -> Path:
    """The base model folder on this machine (--base, else the job's model_path)."""
    path = Path(given or str(spec.get("model_path") or ""))
    if not (path / "config.json").is_file():
        raise VeriError(f"the base model {path} is not on this machine; give its folder with "
                        "--base DIR", key="export")  # fmt: skip
    return path


def _remote_line(job_id: str, host: tuple[str, str], folder: str) -> str:
    """The way out for a job whose folder is on ``host`` (its label, and the machine the
    folder is on: a Slurm job's login node)."""
    label, machine = host
    return (f"job {job_id} ran on {label}: its artifact is in {folder} there. Copy that "
            f"folder into $VERI_HOME/jobs/ here (e.g. scp -r {machine}:{folder} ~/.veri/jobs/), "
            f"then run `veri-tui export {job_id}` again")  # fmt: skip


def _torch_side(*args: str) -> None:
    """`python -m veri_tui.trainer.export ARGS` with this interpreter; its output printed here, a
    refusal raised as VeriError (one line)."""
    if importlib.util.find_spec("torch") is None:
        raise VeriError("export needs torch and transformers here: pip install "
                        "'veri-tui[train]'", key="export")  # fmt: skip
    cmd = [sys.executable, "-m", "veri_tui.trainer.export", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(proc.stdout, end="")
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise VeriError(last.removeprefix("error: export: "), key="export")


def _write(
    args: argparse.Namespace, rec: Mapping[str, Any], job_dir: Path, tmp: Path, out: Path
) -> tuple[str, str]:
    """Fill `tmp` (renamed to `out` once whole) with the export; (form, the base model's
    folder)."""
    spec = rec.get("spec") or {}
    artifact = _artifact(rec, job_dir)
    lora = (artifact / ADAPTER_CONFIG).is_file()
    if lora and args.merge:
        base = _base(spec, args.base)
        # The base is only read: the merged model is written into the export folder.
        print(f"export: merging the LoRA adapter with its base {base} (read, not changed) "
              f"into {out}, one tensor at a time")  # fmt: skip
        _torch_side("merge", str(base), str(artifact), str(tmp))
        for f in artifact.iterdir():  # the tokenizer and chat template the job trained with
            if f.is_file() and not f.name.startswith("adapter_") and f.name not in REWRITTEN:
                shutil.copyfile(f, tmp / f.name)
        return "merged", str(base)
    if not lora and args.merge:
        print(f"export: --merge: job {rec.get('job_id')} is a full fine-tune; its artifact is "
              "the whole model already, nothing to merge")  # fmt: skip
    for f in artifact.iterdir():
        if f.is_file() and f.name not in REWRITTEN:
            shutil.copyfile(f, tmp / f.name)
    if lora:
        return "adapter", str(_base(spec, args.base))
    base = Path(args.base or str(spec.get("model_path") or ""))
    return "full", str(base)


def run(args: argparse.Namespace) -> int:
    """Export the job; exit status 0, or VeriError (one line, status 2)."""
    from veri_tui.commands.jobs import actual_gpu_s
    from veri_tui.export.card import model_card

    if args.push_to_hub:
        from veri_tui.export.hub import check_push

        check_push(args.push_to_hub)  # before minutes of merging
    host, folder = jobs.job_location(args.job)
    job_dir = Path(folder)
    if host is not None and not (job_dir / "job.json").is_file():  # not a shared folder
        raise VeriError(_remote_line(args.job, host, folder), key="export")
    rec = jobs.get_job(args.job)
    out = Path(args.output) if args.output else job_dir / "export"
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        form, base = _write(args, rec, job_dir, tmp, out)
        smoke = _smoke(rec, form, Path(base), tmp)
        card = model_card(rec, job_dir, form, base, smoke, actual_gpu_s(rec))
        (tmp / "README.md").write_text(card)
        manifest.write(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"export: {form} checkpoint in {out} (README.md: the model card)")
    if args.push_to_hub:
        from veri_tui.export.hub import push

        url = push(out, args.push_to_hub, f"veri-tui export of job {args.job}")
        print(f"export: pushed to {url}")
    return 0


def _smoke(rec: Mapping[str, Any], form: str, base: Path, tmp: Path) -> list[dict[str, str]]:
    """Base beside tuned on a few of the job's prompts (veri_tui/trainer/smoke.py), kept in
    smoke.json; skipped when the base is not here (a full fine-tune's own run)."""
    spec = rec.get("spec") or {}
    datasets = spec.get("datasets") or spec.get("dataset")
    if not (base / "config.json").is_file() or not datasets:
        print("smoke: skipped (the job's base model or data is not on this machine)")
        (tmp / "smoke.json").write_text("[]\n")
        return []
    extra = ["--adapter"] if form == "adapter" else []
    _torch_side("smoke", str(base), str(tmp), str(tmp / "smoke.json"), *extra,
                "--datasets", json.dumps(datasets))  # fmt: skip
    return list(json.loads((tmp / "smoke.json").read_text()))
