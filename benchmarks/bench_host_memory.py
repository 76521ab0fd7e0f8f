"""Host memory of each rank: a Qwen3-0.6B-shaped random-weight model on 2 CPU ranks.

    python benchmarks/bench_host_memory.py [--out results.json] [--model-dir /tmp/...]

Builds the model from its config (596,049,920 parameters, random bf16 weights: zero-filled
files would cost no memory; nothing downloaded; cached under /tmp), then runs the real
trainer (`torchrun --nproc-per-node 2 -m veri_tui.trainer`) for one step of 16 tokens per rank per
micro-batch, three times: LoRA r=8 at zero_stage 3, a full fine-tune at zero_stage 3, and
the same full fine-tune with gradient_accumulation_steps 2 (`--jobs` picks some). Each
rank's resident memory is read from /proc/<pid>/status by this script (the pids from the job
folder's pids/rank-<r>, polled every 0.1 s: VmRSS and VmHWM), and by the trainer at its phase
ends (VERI_MEASURE_MEMORY=1: imports, load_policy, train, artifact; VmHWM is reset at each, so
each phase's peak is its own). A rank's peak is the largest of all of those.

Targets (issue 10): LoRA zero-3, every rank at most 2.2 GB; while the artifact is written,
rank 0's resident memory rises at most 0.3 GB (LoRA) and 0.45 GB (full fine-tune) above what
it held when the artifact began; at grad_acc 2 every rank's peak within 0.5 GB of its peak at
grad_acc 1 (FSDP2 reduce-scatters each micro-batch's gradients: no unsharded gradients pile
up). Needs ~10 GB of RAM and minutes of both cores.
Results go into docs/trainer.md by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "trainer"))

from random_model import QWEN3_06B, SMALL, make_random_model  # noqa: E402

from veri_tui.trainer.measure import vm_status  # noqa: E402

GB = 1e9
JOBS = {
    "lora-r8-z3": {"lora_rank": 8},
    "full-z3": {"lora_rank": 0},
    "full-z3-ga2": {"lora_rank": 0, "gradient_accumulation_steps": 2},
}
TARGETS = {
    "lora-r8-z3": (2.2 * GB, 0.3 * GB),
    "full-z3": (None, 0.45 * GB),
    "full-z3-ga2": (None, 0.45 * GB),
}
GA_PEAK_DELTA = 0.5 * GB  # grad_acc 2 against grad_acc 1, per rank


def write_job(folder: Path, model: Path, extra: dict) -> Path:
    """A bare spec the trainer reads: 2 ranks, zero_stage 3, 1 step, 16 tokens per rank and
    micro-batch (as many rows as the global batch)."""
    folder.mkdir(parents=True, exist_ok=True)
    ga = extra.get("gradient_accumulation_steps", 1)
    rows = [{"text": "The quick brown fox jumps over the lazy dog. " * 4} for _ in range(2 * ga)]
    (folder / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hp = {"zero_stage": 3, "data_parallel_size": 2, "micro_batch_size": 1, "max_steps": 1}
    hp.update(max_seq_length=16, gradient_checkpointing=True, precision="bf16", **extra)
    spec = {"method": "sft_text", "model_path": str(model), "dataset": str(folder / "data.jsonl")}
    spec.update(output_dir=str(folder / "output"), device="cpu", hyperparameters=hp)
    (folder / "job.json").write_text(json.dumps({"spec": spec}))
    return folder / "job.json"


def _sample(pids: dict[int, int], peaks: dict[int, int]) -> None:
    for rank, pid in pids.items():
        try:
            st = vm_status(pid)
        except (OSError, KeyError):
            continue
        peaks[rank] = max(peaks.get(rank, 0), st.get("VmRSS", 0), st.get("VmHWM", 0))


def run(job: Path, timeout: float) -> dict:
    """Train the job under torchrun while polling each rank's VmRSS/VmHWM."""
    env = {**os.environ, "VERI_MEASURE_MEMORY": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["-m", "veri_tui.trainer", "--job", str(job)]
    log = open(job.parent / "torchrun.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    pids: dict[int, int] = {}
    peaks: dict[int, int] = {}
    start = time.monotonic()
    while proc.poll() is None:
        for rank in (0, 1):
            f = job.parent / "pids" / f"rank-{rank}"
            if rank not in pids and f.is_file() and f.read_text().strip():
                pids[rank] = int(f.read_text())
        _sample(pids, peaks)
        if time.monotonic() - start > timeout:
            proc.kill()
            raise SystemExit(f"{job}: over {timeout} s; see {job.parent / 'torchrun.log'}")
        time.sleep(0.1)
    log.close()
    if proc.returncode != 0:
        raise SystemExit(f"{job}: torchrun failed; see {job.parent / 'torchrun.log'}")
    out = {"seconds": round(time.monotonic() - start, 1), "ranks": {}}
    for rank in (0, 1):
        lines = (job.parent / "measured" / f"memory-rank-{rank}.jsonl").read_text().splitlines()
        phases = {p["phase"]: p for p in map(json.loads, lines)}
        peak = max([peaks.get(rank, 0)] + [p["hwm_bytes"] for p in phases.values()])
        rise = phases["artifact"]["hwm_bytes"] - phases["train"]["rss_bytes"]
        out["ranks"][rank] = {"peak_bytes": peak, "artifact_rise_bytes": rise, "phases": phases}
    return out


def table(results: dict) -> str:
    """Markdown rows: job, rank, each phase's RSS at its end / peak, the rise, the peak."""
    head = "| job | rank | imports | load (end / peak) | step (end / peak) | artifact peak "
    head += "| artifact rise | rank peak |\n|---|---|---|---|---|---|---|---|"
    rows = [head]
    for name, res in results.items():
        for rank, r in res["ranks"].items():
            ph = r["phases"]

            def both(p: str, ph: dict = ph) -> str:
                return f"{ph[p]['rss_bytes'] / GB:.2f} / {ph[p]['hwm_bytes'] / GB:.2f}"

            rows.append(
                f"| {name} | {rank} | {ph['imports']['rss_bytes'] / GB:.2f} | "
                f"{both('load_policy')} | {both('train')} | "
                f"{ph['artifact']['hwm_bytes'] / GB:.2f} | "
                f"{r['artifact_rise_bytes'] / GB:+.2f} | {r['peak_bytes'] / GB:.2f} |"
            )
    return "\n".join(rows)


def verdicts(results: dict) -> list[str]:
    """One line per target: met or not, with the figure."""
    out = []
    for name, (peak_max, rise_max) in TARGETS.items():
        if name not in results:
            continue
        ranks = results[name]["ranks"]
        if peak_max is not None:
            worst = max(r["peak_bytes"] for r in ranks.values())
            ok = "met" if worst <= peak_max else "NOT met"
            out.append(f"{name}: largest rank peak {worst / GB:.2f} GB (target <= 2.2): {ok}")
        rise = ranks[0]["artifact_rise_bytes"]
        ok = "met" if rise <= rise_max else "NOT met"
        out.append(f"{name}: rank 0 rise during the artifact {rise / GB:+.2f} GB "
                   f"(target <= {rise_max / GB:.2f}): {ok}")  # fmt: skip
    if "full-z3" in results and "full-z3-ga2" in results:
        for rank, r in results["full-z3-ga2"]["ranks"].items():
            delta = r["peak_bytes"] - results["full-z3"]["ranks"][rank]["peak_bytes"]
            ok = "met" if delta <= GA_PEAK_DELTA else "NOT met"
            out.append(f"full-z3-ga2: rank {rank} peak {delta / GB:+.2f} GB against grad_acc 1 "
                       f"(target <= +{GA_PEAK_DELTA / GB:.1f}): {ok}")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) the model, run both jobs, print the table and the verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("/tmp/veri-bench/qwen3-0.6b"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/veri-bench/host-memory"))
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per job")
    shapes = ("0.6b", "small")  # small: a 29M-parameter model, to check the script quickly
    parser.add_argument("--shape", choices=shapes, default="0.6b")
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    dims = QWEN3_06B if args.shape == "0.6b" else SMALL
    folder = args.model_dir if args.shape == "0.6b" else args.model_dir.with_name("small")
    model = make_random_model(folder, dims)
    print(f"model: {model} ({time.monotonic() - t0:.0f} s)", flush=True)
    results = {}
    for name in args.jobs:
        extra = JOBS[name]
        job = write_job(args.work / f"{name}-{int(time.time())}", model, extra)
        results[name] = run(job, args.timeout)
        print(f"{name}: {results[name]['seconds']} s", flush=True)
    print(table(results))
    print("\n".join(verdicts(results)))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
