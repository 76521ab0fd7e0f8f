"""Test stand-in for `python -m trainer`, run by the real torchrun in tests/launch only.

It behaves like a rank of the bundled trainer towards the supervisor, without torch, so the
supervisor tests take a second instead of a model load: it writes pids/rank-<r>, rank 0
writes the plan header and one metric line per step into log.txt, and VERI_FAULT
(`raise:R:S`, `kill:R:S`) fails rank R at step S the way the trainer does (its own failure
record plus the torch elastic error file that `record` would write). STANDIN_STEP_S sets the
seconds per step.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def fail(job_dir: Path, rank: int, world: int, message: str) -> None:
    """Record the failure as trainer.report and torch elastic's `record` would, then exit 1."""
    tb = f'Traceback (most recent call last):\n  File "veri_standin.py"\nRuntimeError: {message}\n'
    rec = {
        "rank": rank,
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "node": 0,
        "world_size": world,
        "time_ns": time.time_ns(),
        "type": "RuntimeError",
        "code": "UNKNOWN",
        "message": message,
        "peer_failure": False,
        "traceback": tb,
    }
    tmp = job_dir / "failures" / f".rank-{rank}.tmp"
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, job_dir / "failures" / f"rank-{rank}.json")
    elastic = {
        "message": {
            "message": f"RuntimeError: {message}",
            "extraInfo": {"py_callstack": tb, "timestamp": str(int(time.time()))},
        }
    }
    Path(os.environ["TORCHELASTIC_ERROR_FILE"]).write_text(json.dumps(elastic))
    print(tb, file=sys.stderr, flush=True)
    raise SystemExit(1)


def main() -> None:
    job_path = Path(sys.argv[sys.argv.index("--job") + 1])
    spec = json.loads(job_path.read_text())["spec"]
    job_dir = job_path.parent
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (job_dir / "pids" / f"rank-{rank}").write_text(f"{os.getpid()}\n")
    steps = int(spec["hyperparameters"].get("max_steps", 3))
    step_s = float(os.environ.get("STANDIN_STEP_S", "0.05"))
    faults = [f.split(":") for f in os.environ.get("VERI_FAULT", "").split(",") if f]
    log = open(job_dir / "log.txt", "a") if rank == 0 else None
    if log:
        log.write("\n".join(spec["plan_header"]) + "\n")
        log.flush()
    for step in range(1, steps + 1):
        for kind, f_rank, f_step in faults:
            if int(f_rank) == rank and int(f_step) == step:
                if kind == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                fail(job_dir, rank, world, f"injected failure at step {step} (VERI_FAULT)")
        time.sleep(step_s)
        if log:
            metric = {
                "step": step,
                "total_steps": steps,
                "loss": 1.0 / step,
                "lr": 1e-4,
                "grad_norm": 1.0,
                "tokens_per_s": 100.0,
                "peak_mem_bytes": 0,
            }
            log.write(json.dumps(metric) + "\n")
            log.flush()


if __name__ == "__main__":
    main()
