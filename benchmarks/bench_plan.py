"""Benchmark: `veri-tui plan` on a 70B-shaped 30-shard checkpoint, and the planner alone.

Targets: the whole command (through veri_tui/entry.py, as the console script runs it) at
most 2.0x `python -c "import pydantic"` measured in the same run (issue 28: the knobs are
checked without building a pydantic schema; 2.5x in issue 9); the planner call (plan_job
with the model info in hand) under 5 ms. The checkpoint is header-only (sparse
files), shaped like meta-llama/Llama-3.1-70B.

Noise: besides the ratio of the medians, each alternated pair's own ratio is reported as a
median and interquartile range; load from other work hits both commands of a pair alike.

    python benchmarks/bench_plan.py [--runs 15] [--python PATH]

`--python` times the two commands with another interpreter that has veri-tui and pydantic
installed (a clean virtual environment, say); the in-process figures use this one.

The headline pair runs with bytecode caching on (a temporary PYTHONPYCACHEPREFIX), as an
installed veri-tui runs; when PYTHONDONTWRITEBYTECODE is set the pair is also run as is.
Results are copied into docs/planning.md by hand, with the machine they ran on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from veri_tui.plan import job_from_fields, plan_job, read_model_info

# The header-only checkpoint writer is test support (tests/support/synthetic.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.synthetic import LLAMA_3_1_70B, write_checkpoint  # noqa: E402


def wall_pair(
    a: list[str], b: list[str], runs: int, env: dict[str, str] | None = None
) -> tuple[list[float], list[float]]:
    """Wall-clock seconds of fresh processes, the two commands alternated so that load from
    other work on the machine hits both alike (one warm-up run each, which also fills the
    bytecode cache when `env` allows one)."""
    subprocess.run(a, check=True, capture_output=True, env=env)
    subprocess.run(b, check=True, capture_output=True, env=env)
    out_a, out_b = [], []
    for _ in range(runs):
        for cmd, out in ((a, out_a), (b, out_b)):
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env)
            out.append(time.perf_counter() - t0)
    return out_a, out_b


def bytecode_env(cache: Path) -> dict[str, str]:
    """The environment with bytecode caching on, into `cache` (not the source tree).

    An installed veri-tui has .pyc files (pip compiles them), as pydantic here does; with
    PYTHONDONTWRITEBYTECODE set (as in some containers) an editable checkout instead
    recompiles each of its modules in every process, which only our side of the ratio pays.
    Both commands of a pair run in the same environment.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def in_process(fn, runs: int) -> list[float]:
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def report(name: str, samples: list[float]) -> float:
    med = statistics.median(samples)
    print(
        f"{name:<44} median {med * 1e3:8.2f} ms  (min {min(samples) * 1e3:.2f}, n={len(samples)})"
    )
    return med


def pair_ratios(base: list[float], cmd: list[float]) -> str:
    """Each alternated pair's cmd/base ratio: median and interquartile range."""
    q1, med, q3 = statistics.quantiles([c / b for b, c in zip(base, cmd, strict=True)], n=4)
    return f"per pair {med:.2f}x (IQR {q1:.2f}-{q3:.2f}x, n={len(base)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--python", default=sys.executable, help="interpreter for the commands")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama-3.1-70b"
        n = write_checkpoint(folder, LLAMA_3_1_70B, shards=30)
        print(f"checkpoint: {folder} ({n:,} parameters, 30 shards, sparse)")
        py = args.python
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; commands run by {py}")
        cli = [py, "-m", "veri_tui", "plan", "--model", str(folder)]
        cli += ["--gpu", "H100-80GB", "--gpu-count", "8"]
        imp = [py, "-c", "import pydantic"]
        base, cmd = wall_pair(imp, cli, args.runs, bytecode_env(Path(tmp) / "pycache"))
        pyd = report("python -c 'import pydantic'", base)
        plan_s = report("veri-tui plan (70B, 30 shards)", cmd)
        nopyc = os.environ.get("PYTHONDONTWRITEBYTECODE")
        if nopyc:
            # The same pair as this environment runs it: our modules compiled every time.
            base_n, cmd_n = wall_pair(imp, cli, args.runs)
            pyd_n = report("  same, PYTHONDONTWRITEBYTECODE set: pydantic", base_n)
            plan_n = report("  same, PYTHONDONTWRITEBYTECODE set: plan", cmd_n)
        # The floor for any pydantic-validated config: one model class built and used.
        # `import pydantic` alone is lazy and builds nothing.
        one_model = "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int = 1\nA(x=2)"
        base2, floor = wall_pair(
            imp, [py, "-c", one_model], args.runs, bytecode_env(Path(tmp) / "pycache")
        )
        floor_s = report("one pydantic model built + validated", floor)
        print(f"  (same pairing: import pydantic {statistics.median(base2) * 1e3:.2f} ms)")
        info = read_model_info(str(folder))
        job = job_from_fields({"model": str(folder), "gpu": "H100-80GB", "gpu_count": 8})
        read_s = report(
            "read_model_info (30 headers)",
            in_process(lambda: read_model_info(str(folder)), args.runs * 4),
        )
        call_s = report(
            "plan_job(job, info) (the planner alone)",
            in_process(lambda: plan_job(job, info), args.runs * 20),
        )
        ratio = plan_s / pyd
        print(
            f"ratio plan / import pydantic: {ratio:.2f}x (target <= 2.0x); {pair_ratios(base, cmd)}"
        )
        if nopyc:
            ratio_n = plan_n / pyd_n
            print(
                f"  with PYTHONDONTWRITEBYTECODE set: {ratio_n:.2f}x; {pair_ratios(base_n, cmd_n)}"
            )
        print(f"ratio one-model floor / import pydantic: {floor_s / statistics.median(base2):.2f}x")
        print(
            f"planner alone: {call_s * 1e3:.2f} ms (target < 5 ms); headers {read_s * 1e3:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
