"""One-GPU check of the bundled trainer against the plan: peak memory, tokens/s and MFU.

The GPU machine has torch, transformers, peft and safetensors but no pydantic, so the check
has two halves:

    python benchmarks/gpu_check.py --prepare              # here (veri-tui installed)
    OUT=results bash benchmarks/gpu_check.sh              # there: builds, trains, judges

--prepare plans Qwen3-0.6B- and 1.7B-shaped models and the feature runs (configs only,
nothing downloaded) for each GPU a device machine may be (H100-80GB and H200-141GB),
fetches bitsandbytes' wheel for the QLoRA run where a registry answers, and writes
benchmarks/gpu-check-prepared/ (gpu_check_prepare.py, gpu_check_wheels.py): untracked and not
git-ignored, so it travels with the tree to a lent GPU machine. The run half
(gpu_check_run.py, stdlib only apart from the trainer it starts) asks CUDA which GPU it is
on, runs that GPU's plan, and leaves four files in $OUT (gpu_check_out.py). It exits 0 when
every run it could judge passed (QLoRA without bitsandbytes is reported, not failed).
CPU mode: --prepare DIR --device cpu --shapes tiny --gpu L4-24GB (2 CPU ranks, gloo).
--rehearse: every run of the prepared check here, on fake CUDA (gpu_check_rehearse.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the trainer package, when run from a bare repo copy
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_run import fill_paths, run_all, run_timeout  # noqa: E402

__all__ = ["fill_paths", "main", "run_timeout"]  # the run half's, for tests and callers
PREPARED = REPO / "benchmarks" / "gpu-check-prepared"  # travels with the tree (not ignored)
WHEELS = REPO / "benchmarks" / "wheels"  # git-ignored: the fetched wheel, kept


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


def prepare_cli(args: argparse.Namespace) -> int:
    """--prepare: plan every run for each GPU named, fetch the QLoRA wheel, write DIR."""
    from gpu_check_features import FEATURES
    from gpu_check_prepare import prepare
    from gpu_check_report import render
    from gpu_check_wheels import fetch

    count = args.gpu_count or (1 if args.device == "cuda" else 2)
    chosen = args.features or ("all" if args.device == "cuda" else "none")
    names = {"all": [f.name for f in FEATURES], "none": []}.get(chosen, chosen.split(","))
    needs_wheel = any(f.needs for f in FEATURES if f.name in names)
    wheels, note = list(args.wheel or []), "given with --wheel" if args.wheel else ""
    if not wheels and needs_wheel and args.fetch:
        wheel, note = fetch(WHEELS)
        wheels = [wheel] if wheel else []
    elif not wheels and needs_wheel:
        note = "not fetched (--no-fetch)"
    shapes = [x for x in args.shapes.split(",") if x]
    try:
        index = prepare(
            args.dir, shapes=shapes, mbs_list=[int(x) for x in args.mbs.split(",")],
            gc_list=[x == "on" for x in args.gc.split(",")], seq=args.seq, steps=args.steps,
            gpus=[g for g in args.gpu.split(",") if g], gpu_count=count, device=args.device,
            features=names, feature_seq=args.feature_seq, feature_steps=args.feature_steps,
            feature_shape=args.feature_shape, wheels=wheels, wheel_note=note,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if needs_wheel:
        qlora = "QLoRA runs there" if wheels else "QLoRA is reported there as not judged"
        print(f"bitsandbytes: {note or 'none'}; {qlora}")
    first = index["plans"][index["gpus"][0]]
    print(
        f"prepared {len(first['runs'])} runs for {', '.join(index['gpus'])} in {args.dir}; "
        f"covers: {', '.join(first['coverage']) or 'performance only'}; the plan's figures:"
    )
    for gpu in index["gpus"]:
        print("\n" + render(index["plans"][gpu], []))
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, nargs="?", default=PREPARED,
                   help="the prepared folder (default: benchmarks/gpu-check-prepared)")  # fmt: skip
    p.add_argument("--prepare", action="store_true", help="plan and write DIR (needs veri-tui)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="with --prepare")
    p.add_argument("--shapes", default="qwen3-0.6b,qwen3-1.7b", help="with --prepare")
    p.add_argument("--mbs", default="4", help="micro batch sizes, with --prepare")
    p.add_argument("--gc", default="on", help="gradient checkpointing, with --prepare")
    p.add_argument("--features", default=None,
                   help="feature runs, with --prepare: all (default with cuda), none (default "
                   "with cpu), or names from gpu_check_features.FEATURES")  # fmt: skip
    p.add_argument("--feature-shape", default=None, help="tiny: small stand-ins (CPU mode)")
    p.add_argument("--feature-seq", type=int, default=1024, help="with --prepare")
    p.add_argument("--feature-steps", type=int, default=6, help="with --prepare")
    p.add_argument("--wheel", type=Path, action="append", default=None,
                   help="a wheel the GPU machine unpacks, with --prepare (default: "
                   "bitsandbytes, fetched with pip download into benchmarks/wheels)")  # fmt: skip
    p.add_argument(
        "--no-fetch",
        dest="fetch",
        action="store_false",
        help="with --prepare: never run pip download (QLoRA not judged there)",
    )
    p.add_argument("--seq", type=int, default=2048, help="with --prepare")
    p.add_argument("--steps", type=int, default=12, help="with --prepare")
    p.add_argument("--gpu", default="H100-80GB,H200-141GB",
                   help="catalog GPUs planned for, with --prepare (the run picks the one it "
                   "finds)")  # fmt: skip
    p.add_argument("--gpu-count", type=int, default=None, help="default 1 (cuda), 2 (cpu)")
    p.add_argument(
        "--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    )
    p.add_argument("--work", type=Path, default=None,
                   help="models, data, jobs (default: a temp dir)")  # fmt: skip
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the whole run, builds included (default 430; 550 rehearsing)",
    )
    p.add_argument("--floor-s", type=float, default=30.0, help="time kept for each later run")
    p.add_argument("--cap-s", type=float, default=150.0, help="the most one run may take")
    p.add_argument(
        "--rehearse",
        action="store_true",
        help="run every run here on fake CUDA (gpu_check_rehearse.py), same $OUT",
    )
    p.add_argument("--rehearse-gpu", default="H100", choices=("H100", "H200"),
                   help="the GPU a rehearsal plays")  # fmt: skip
    p.add_argument("--build-model", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--build-device", default="cuda", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """Prepare (here), build a model (child), or run the prepared check (GPU machine)."""
    args = _parser().parse_args(argv)
    if args.build_model:
        build_model(args.dir, args.build_device)
        return 0
    if args.prepare:
        return prepare_cli(args)
    if not (args.dir / "plan.json").is_file():
        print(f"error: {args.dir}/plan.json missing: run 'python benchmarks/gpu_check.py "
              f"--prepare {args.dir}' where veri-tui is installed (the folder then travels "
              "with the tree; or name it in the device run's carry)", file=sys.stderr)  # fmt: skip
        return 2
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    # The outer `timeout` sends SIGTERM: unwind so the running job is stopped, not orphaned.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    dev, budget = None, args.budget_s or (550.0 if args.rehearse else 430.0)
    if args.rehearse:  # here only: the fake-CUDA harness and the test support it needs
        from gpu_check_rehearse import FakeDevice

        dev = FakeDevice(args.rehearse_gpu)
    try:
        return run_all(args.dir, args.out, work, budget, args.floor_s, args.cap_s, dev)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
