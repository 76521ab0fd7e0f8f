"""`veri-tui export JOB [--merge] [--push-to-hub REPO]`: a finished job's artifact as a
model folder to serve or share (docs/export.md).

A LoRA job exports its adapter, or with --merge the base with the adapter merged in
(veri_tui/export/merge.py); a full fine-tune exports its checkpoint (--merge has nothing
to do: one line says so). The artifact is checked against its manifest first; the export
is written aside (`.<name>.tmp`) and renamed into place, with the smoke generation
(smoke.json), the model card (README.md) and its own manifest, so a failed export leaves
no half-written folder. A job that ran over SSH keeps its artifact on its host: the one
line says how to bring its folder here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from jobfolder import manifest
from jobfolder.datasource import sources_of
from jobfolder.layout import OUTPUT
from veri_tui.errors import VeriError
from veri_tui.launch import jobs

#: Files of an adapter or model folder that the export writes anew (or leaves out).
REWRITTEN = ("README.md", "manifest.json")


def _artifact(rec: dict, job_dir: Path) -> Path:
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


def _base(spec: dict, given: str | None) -> Path:
    """The base model folder on this machine (--base, else the job's model_path)."""
    path = Path(given or str(spec.get("model_path") or ""))
    if not (path / "config.json").is_file():
        raise VeriError(f"the base model {path} is not on this machine; give its folder with "
                        "--base DIR", key="export")  # fmt: skip
    return path


def _remote_line(job_id: str, rec: dict) -> str:
    host = rec.get("host") or "its host"
    return (f"job {job_id} ran on {host}: its artifact is there. Copy its folder into "
            f"$VERI_HOME/jobs/ (e.g. scp -r {host}:<VERI_HOME>/jobs/{job_id} "
            f"~/.veri/jobs/), then run `veri-tui export {job_id}` again")  # fmt: skip


def _write(args: argparse.Namespace, rec: dict, job_dir: Path, tmp: Path) -> tuple[str, str]:
    """Fill `tmp` with the export; (kind, what to smoke-test as tuned)."""
    from veri_tui.export.merge import ADAPTER_CONFIG, merge_lora

    spec = rec.get("spec") or {}
    artifact = _artifact(rec, job_dir)
    lora = (artifact / ADAPTER_CONFIG).is_file()
    if lora and args.merge:
        base = _base(spec, args.base)
        print(f"export: merging the LoRA adapter into {base}, one tensor at a time")
        merge_lora(base, artifact, tmp)
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
    return ("adapter" if lora else "full"), str(_base(spec, args.base) if lora else artifact)


def run(args: argparse.Namespace) -> int:
    """Export the job; exit status 0, or VeriError (one line, status 2)."""
    from veri_tui.commands.jobs import actual_gpu_s
    from veri_tui.export.card import model_card

    if args.push_to_hub:
        from veri_tui.export.hub import check_push

        check_push(args.push_to_hub)  # before minutes of merging
    rec = jobs.get_job(args.job)
    folder = jobs.local_folder(args.job)
    if folder is None:
        raise VeriError(_remote_line(args.job, rec), key="export")
    job_dir = Path(folder)
    out = Path(args.output) if args.output else job_dir / "export"
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        kind, base = _write(args, rec, job_dir, tmp)
        smoke = _smoke(rec, kind, Path(base), tmp)
        card = model_card(rec, job_dir, kind, base, smoke, actual_gpu_s(rec))
        (tmp / "README.md").write_text(card)
        manifest.write(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"export: {kind} checkpoint in {out} (README.md: the model card)")
    if args.push_to_hub:
        from veri_tui.export.hub import push

        url = push(out, args.push_to_hub, f"veri-tui export of job {args.job}")
        print(f"export: pushed to {url}")
    return 0


def _smoke(rec: dict, kind: str, base: Path, tmp: Path) -> list[dict[str, str]]:
    """Base beside tuned on a few of the job's prompts; printed and kept in smoke.json."""
    from transformers import AutoTokenizer

    from veri_tui.export.smoke import prompts, smoke

    spec = rec.get("spec") or {}
    try:
        sources = sources_of(spec.get("datasets") or spec.get("dataset"))
    except ValueError:
        sources = []
    texts = prompts(sources, AutoTokenizer.from_pretrained(tmp)) if sources else []
    if kind == "full":
        base = Path(str(spec.get("model_path") or ""))
        if not (base / "config.json").is_file():
            texts = []  # no base here to compare with
    results = smoke(base, tmp, kind == "adapter", texts) if texts else []
    for r in results:
        print(f"smoke: {r['prompt']!r}\n  base:  {r['base']!r}\n  tuned: {r['tuned']!r}")
    if not results:
        print("smoke: skipped (the job's data or base model is not on this machine)")
    (tmp / "smoke.json").write_text(json.dumps(results, indent=1) + "\n")
    return results
