"""`python -m veri_tui.trainer.fakecuda --job job.json`: trace a job's step on fake CUDA.

Reads the job spec as a rank does (config.py), plays rank `--rank` of the job's
data_parallel_size ranks on fake CUDA devices (trace.py) and prints what the trace measured
as one JSON object (`veri-tui plan --trace` runs this in a child process). A spec the
trainer refuses, or a torch this cannot fake, is one `error: ...` line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from veri_tui.jobfolder.contract.errors import TrainerError
from veri_tui.trainer.config import from_spec, load_spec
from veri_tui.trainer.fakecuda.device import FakeCudaError, check_torch
from veri_tui.trainer.fakecuda.session import DEFAULT_GPU_NAME


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m veri_tui.trainer.fakecuda", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--job", required=True, type=Path, help="job.json (or a bare spec)")
    parser.add_argument("--rank", type=int, default=0, help="the rank to play (default 0)")
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="GPUs of a node (default: every rank on one node)")  # fmt: skip
    parser.add_argument("--gpu-name", default=DEFAULT_GPU_NAME, help="torch.cuda's device name")
    parser.add_argument("--no-save", action="store_true", help="skip the checkpoint's save plan")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Trace the job; print its JSON; 0, or 2 with one error line."""
    args = _parse(argv)
    try:
        check_torch()
        job = args.job.resolve()
        cfg = from_spec(load_spec(job), job.parent)
        from veri_tui.trainer.fakecuda.trace import trace

        run = trace(cfg, cfg.data_parallel_size, rank=args.rank, gpus=args.gpus_per_node,
                    gpu_name=args.gpu_name, save=not args.no_save)  # fmt: skip
    except (TrainerError, FakeCudaError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(run.summary(), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
