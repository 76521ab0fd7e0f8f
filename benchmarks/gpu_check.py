"""One-GPU check of the bundled trainer against the plan: peak memory, tokens/s and MFU.

The GPU machine has torch, transformers, peft and safetensors but no pydantic, so the check
has two halves:

    python benchmarks/gpu_check.py --prepare DIR     # here (veri-tui installed): plans + specs
    OUT=results benchmarks/gpu_check.sh DIR          # there: builds, trains, prints the table

--prepare plans Qwen3-0.6B- and 1.7B-shaped models (configs only, nothing downloaded) on one
H200-141GB at sequence 2048, micro_batch_size 1 and 4, gradient checkpointing on and off
(8 runs), writing each job.json and the predicted figures (benchmarks/gpu_check_prepare.py).
The run half, stdlib only apart from the trainer it starts, builds random-weight models from
the configs (in a child process: this one never touches CUDA), then runs every job through
the project's own supervisor (`python -m veri_tui.jobfolder.supervise`, in a session of its own).
Each run's timeout comes out of what is left of the total budget, keeping a floor for the runs
after it; a run that overruns is cancelled the supervisor's way (SIGTERM: it ends torchrun
and every rank), then anything of the job still alive is found by its command line in /proc
and killed, and the next run starts. Results are rewritten after every run (gpu_check.json,
gpu_check.md under --out, default $OUT). CPU mode: --prepare DIR --device cpu --shapes tiny
(2 CPU ranks, gloo).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the trainer package, when run from a bare repo copy
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_files import bring_back, build_datasets, unpack_wheels  # noqa: E402
from gpu_check_jobs import SITE_ENV, missing, run_feature  # noqa: E402
from gpu_check_report import render, summarize  # noqa: E402

from veri_tui.jobfolder.atomic import write_text_atomic  # noqa: E402 (stdlib only)

STOP_RESERVE_S = 20.0  # cancelling a run: the supervisor's 5 s grace, a SIGKILL, a /proc scan
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
WHEELS = REPO / "benchmarks" / "wheels"  # `pip download --no-deps bitsandbytes -d` here


def run_timeout(remaining_s: float, runs_left: int, floor_s: float, cap_s: float) -> float | None:
    """Seconds the next run may take: what is left of the budget, less `floor_s` kept for
    each run after it, at most `cap_s`; None (skip it) when that is under `floor_s`."""
    t = min(cap_s, remaining_s - floor_s * max(runs_left - 1, 0))
    return t if t >= floor_s else None


def fill_paths(record: dict[str, Any], work: Path) -> dict[str, Any]:
    """The prepared job.json with this machine's work folder in place of @WORK@."""
    spec = dict(record["spec"])
    for key in ("model_path", "dataset", "output_dir"):
        spec[key] = spec[key].replace("@WORK@", str(work))
    for key in ("datasets", "eval_datasets"):  # each source's own path (issue 27's sources)
        if spec.get(key):
            spec[key] = [{**s, "path": s["path"].replace("@WORK@", str(work))} for s in spec[key]]
    return {**record, "spec": spec}


def build_model(folder: Path, device: str) -> None:
    """Random bf16 weights for folder/config.json (run in a child process); prints the
    device as one JSON line."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from veri_tui.trainer.model import dtype_kwarg

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, **dtype_kwarg(torch.bfloat16))
    model.save_pretrained(folder)
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    print(json.dumps({"device": f"{name}, torch {torch.__version__}"}))


def build_models(prep: Path, work: Path, plan: dict[str, Any], deadline: float) -> dict:
    """Each shape's model folder (config from DIR, bundled tokenizer, random weights);
    returns {"device": ..., "failed": {shape: why}}."""
    device = "cuda" if plan["device"] in ("cuda", "auto") else "cpu"
    found: dict[str, Any] = {"device": device, "failed": {}}
    for shape in plan["shapes"]:
        folder = work / "models" / shape
        config = (prep / "models" / shape / "config.json").read_text()
        if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
            continue  # a --work folder kept from an earlier run: the same random model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(config)
        for name in TOKENIZER_FILES:
            shutil.copy(REPO / "assets" / "tiny-model" / name, folder / name)
        left = max(deadline - time.monotonic() - STOP_RESERVE_S, 1.0)
        cmd = [sys.executable, __file__, str(folder), "--build-model", "--build-device", device]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            found["failed"][shape] = f"model build over the budget ({left:.0f} s)"
            continue
        if proc.returncode != 0:
            found["failed"][shape] = "model build failed: " + proc.stderr.strip()[-500:]
            continue
        found["device"] = json.loads(proc.stdout.strip().splitlines()[-1])["device"]
        print(f"model {shape}: built in {time.monotonic() - t0:.0f} s", flush=True)
    return found


def write_results(out: Path | None, plan: dict[str, Any], results: list[dict], device: str) -> str:
    """Rewrite gpu_check.json / gpu_check.md (atomically) and return the table."""
    table = render(plan, results, device)
    if out is not None:
        for name, text in (
            ("gpu_check.json", json.dumps(results, indent=1)),
            ("gpu_check.md", table),
        ):
            write_text_atomic(out / name, text + "\n")
    return table


def run_all(
    prep: Path, out: Path | None, work: Path, budget_s: float, floor_s: float, cap_s: float
) -> int:
    """Build, run every prepared job inside the budget, write results after each."""
    deadline = time.monotonic() + budget_s
    plan = json.loads((prep / "plan.json").read_text())
    built = build_models(prep, work, plan, deadline)
    build_datasets(work, plan["runs"])
    site = unpack_wheels(prep, work)
    if site is not None:  # the jobs import the carried wheels (bitsandbytes) from here
        SITE_ENV["PYTHONPATH"] = f"{REPO}{os.pathsep}{site}"
    results: list[dict[str, Any]] = []
    for i, expected in enumerate(plan["runs"]):
        name = expected["name"]
        remaining = deadline - time.monotonic() - STOP_RESERVE_S
        timeout = run_timeout(remaining, len(plan["runs"]) - i, floor_s, cap_s)
        why = missing(expected)
        if expected["shape"] in built["failed"]:
            results.append(summarize(expected, {"status": built["failed"][expected["shape"]]}))
        elif why:
            results.append(summarize(expected, {"status": why}))
        elif timeout is None:
            results.append(summarize(expected, None))
        else:
            job = work / "jobs" / name / "job.json"
            job.parent.mkdir(parents=True, exist_ok=True)
            record = fill_paths(json.loads((prep / "runs" / name / "job.json").read_text()), work)
            job.write_text(json.dumps(record, indent=1))
            raw = run_feature(job, expected, timeout)
            raw["files"] = bring_back(job.parent, out, name)  # logs, failure records
            results.append(summarize(expected, raw))
            shutil.rmtree(job.parent / "output", ignore_errors=True)  # the artifact: GBs
        print(json.dumps(results[-1]), flush=True)
        write_results(out, plan, results, built["device"])
    print(write_results(out, plan, results, built["device"]))
    return 0 if all(r["status"] == "succeeded" for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    """Prepare (here), build a model (child), or run the prepared check (GPU machine)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="the prepared folder (plan.json, models/, runs/)")
    p.add_argument("--prepare", action="store_true", help="plan and write DIR (needs veri-tui)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="with --prepare")
    p.add_argument("--shapes", default="qwen3-0.6b,qwen3-1.7b", help="with --prepare")
    p.add_argument("--mbs", default="4", help="micro batch sizes, with --prepare")
    p.add_argument("--gc", default="on", help="gradient checkpointing, with --prepare")
    p.add_argument(
        "--features",
        default=None,
        help="feature runs, with --prepare: all (default with cuda), none "
        "(default with cpu), or names from gpu_check_features.FEATURES",
    )
    p.add_argument("--feature-shape", default=None, help="tiny: small stand-ins (CPU mode)")
    p.add_argument("--feature-seq", type=int, default=1024, help="with --prepare")
    p.add_argument("--feature-steps", type=int, default=6, help="with --prepare")
    p.add_argument(
        "--wheel",
        type=Path,
        action="append",
        default=None,
        help="a wheel the GPU machine unpacks (default: benchmarks/wheels/*.whl)",
    )
    p.add_argument("--seq", type=int, default=2048, help="with --prepare")
    p.add_argument("--steps", type=int, default=12, help="with --prepare")
    p.add_argument("--gpu", default="H200-141GB", help="catalog GPU planned for, with --prepare")
    p.add_argument("--gpu-count", type=int, default=None, help="default 1 (cuda), 2 (cpu)")
    p.add_argument(
        "--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    )
    p.add_argument(
        "--work", type=Path, default=None, help="models, data, jobs (default: a temp dir)"
    )
    p.add_argument("--budget-s", type=float, default=430.0, help="the whole run, builds included")
    p.add_argument("--floor-s", type=float, default=30.0, help="time kept for each later run")
    p.add_argument("--cap-s", type=float, default=150.0, help="the most one run may take")
    p.add_argument("--build-model", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--build-device", default="cuda", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build_model:
        build_model(args.dir, args.build_device)
        return 0
    if args.prepare:
        from gpu_check_features import FEATURES
        from gpu_check_prepare import prepare

        count = args.gpu_count or (1 if args.device == "cuda" else 2)
        chosen = args.features or ("all" if args.device == "cuda" else "none")
        names = {"all": [f.name for f in FEATURES], "none": []}.get(chosen, chosen.split(","))
        wheels = args.wheel if args.wheel is not None else sorted(WHEELS.glob("*.whl"))
        shapes = [x for x in args.shapes.split(",") if x]
        summary = prepare(
            args.dir, shapes=shapes, mbs_list=[int(x) for x in args.mbs.split(",")],
            gc_list=[x == "on" for x in args.gc.split(",")], seq=args.seq, steps=args.steps,
            gpu=args.gpu, gpu_count=count, device=args.device, features=names,
            feature_seq=args.feature_seq, feature_steps=args.feature_steps,
            feature_shape=args.feature_shape, wheels=wheels,
        )  # fmt: skip
        carried = ", ".join(summary["wheels"]) or "none (QLoRA is skipped there)"
        print(f"prepared {len(summary['runs'])} runs in {args.dir} (wheels: {carried}); "
              f"covers: {', '.join(summary['coverage']) or 'performance only'}; "
              "the plan's figures:\n")  # fmt: skip
        print(render(summary, []))
        return 0
    if not (args.dir / "plan.json").is_file():
        print(f"error: dir: {args.dir}/plan.json missing; run --prepare {args.dir} where "
              "veri-tui is installed", file=sys.stderr)  # fmt: skip
        return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    # The outer `timeout` sends SIGTERM: unwind so the running job is stopped, not orphaned.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        return run_all(args.dir, args.out, work, args.budget_s, args.floor_s, args.cap_s)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
