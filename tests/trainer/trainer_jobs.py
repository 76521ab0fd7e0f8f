"""Test helpers: write job.json files from the planning core and run the trainer under torchrun.

The spec follows docs/interfaces.md section 2, with the plan header, resolved_parallelism and
states estimate taken from `veri_tui.plan.plan(...)`, as the launcher would write them.

Run as a script under torchrun (`torchrun --nproc-per-node 2 tests/trainer/trainer_jobs.py
JOB.json ...`), it trains several jobs one after another in ONE torchrun: each through the
trainer's own `train()`, exactly as `python -m veri_tui.trainer --job` runs it, so only the process
start and the process group are shared (a torchrun start costs seconds, and the
state-measurement matrix has two dozen jobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from veri_tui.plan import plan

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-model"
TINY_MOE = REPO / "assets" / "tiny-moe"  # Qwen3-MoE: a dense layer, then 8 experts (2 a token)
DATA = REPO / "assets" / "data"
DATASETS = {
    "text": DATA / "sft.jsonl",
    "messages": DATA / "sft_messages.jsonl",
    "prompt_completion": DATA / "sft_prompt_completion.jsonl",
    "dpo": DATA / "dpo.jsonl",
}
# Settings under which the tiny model learns visibly within a few dozen CPU steps.
FAST = {"learning_rate": 3e-3, "warmup_steps": 2, "gradient_checkpointing": True}


def write_job(
    job_dir: Path,
    *,
    method: str = "sft_text",
    dataset: str | Path = "text",
    gpu_count: int = 2,
    model: Path = TINY,
    plan_with: Path = TINY,
    env: dict[str, str] | None = None,
    **hyperparameters: Any,
) -> Path:
    """Plan with veri_tui.plan (on `plan_with`: the bundled model unless given) and write
    <job_dir>/job.json; returns its path. ``env``: set while `run_many` trains this job (the
    trainer ignores the key)."""
    hp = {**FAST, **hyperparameters}
    record = plan(model=str(plan_with), method=method, gpu="L4-24GB", gpu_count=gpu_count, **hp)
    d = record.to_dict()
    data_path = DATASETS.get(str(dataset), Path(dataset))
    spec = {
        "method": method,
        "model": str(model),
        "model_path": str(model),
        "dataset": str(data_path),
        "output_dir": str(job_dir / "output"),
        "gpu": "L4-24GB",
        "gpu_count": gpu_count,
        "nproc_per_node": gpu_count,
        "device": "auto",
        "hyperparameters": hp,
        "resolved_parallelism": d["resolved_parallelism"],
        "plan_header": [*d["header_lines"], d["plan_line"]],
        "states_bytes_per_gpu": d["states_bytes_per_gpu"],
    }
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / "job.json"
    job = {"job_id": job_dir.name, "status": "running", "spec": spec, "error": None}
    if env:
        job["test_env"] = env
    path.write_text(json.dumps(job, indent=1))
    return path


def run_trainer(
    job: Path, nproc: int, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node N -m veri_tui.trainer --job JOB` with one thread per CPU rank."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("VERI_FAULT", None) if "VERI_FAULT" not in (env or {}) else None
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    cmd += ["--log-dir", str(job.parent / "elastic"), "-m", "veri_tui.trainer", "--job", str(job)]
    return subprocess.run(
        cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def metrics(job_dir: Path) -> list[dict[str, Any]]:
    """The metric lines rank 0 wrote."""
    path = job_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def failure(job_dir: Path, rank: int) -> dict[str, Any] | None:
    """failures/rank-<r>.json, or None when that rank left none."""
    path = job_dir / "failures" / f"rank-{rank}.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_many(jobs: list[Path], env: dict[str, str] | None = None, timeout: float = 240) -> None:
    """Run several jobs in one 2-rank torchrun (this file as a script); assert success."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += [__file__, *map(str, jobs)]
    proc = subprocess.run(
        cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


# The golden loss curve (tests/fixtures/golden_losses.json, written by
# scripts/make_golden_losses.py, checked by test_golden_loss.py): full fine-tune sft_text on
# the bundled text set, the default precision, 2 ranks x mbs 2 (global batch 4), 20 steps,
# at each stage, FAST settings.
GOLDEN = {"precision": "bf16", "micro_batch_size": 2, "max_steps": 20, "seed": 42}
GOLDEN_STAGES = (0, 2, 3)


def golden_config() -> dict[str, Any]:
    """Everything the golden runs depend on that a test can see (stored in the fixture)."""
    data = DATASETS["text"].relative_to(REPO).as_posix()
    return {"method": "sft_text", "dataset": data, "gpu_count": 2, **FAST, **GOLDEN}


def golden_losses(root: Path, env: dict[str, str] | None = None) -> dict[str, list[float]]:
    """Run the golden configuration at every stage in one torchrun; {"<stage>": losses}."""
    jobs = {z: write_job(root / f"golden-z{z}", zero_stage=z, **GOLDEN) for z in GOLDEN_STAGES}
    run_many(list(jobs.values()), env=env)
    return {str(z): [m["loss"] for m in metrics(job.parent)] for z, job in jobs.items()}


def checkpoint_tensors(folder: Path) -> dict[str, Any]:
    """A committed DCP checkpoint's model tensors, read without a process group."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = folder.parent / f"{folder.name}.pt"
    dcp_to_torch_save(folder, out)
    return torch.load(out, weights_only=False)["model"]


def _train_each(paths: list[str]) -> None:
    """The script mode: train each job in turn on this rank."""
    import torch.distributed as dist

    from veri_tui.trainer.config import from_spec, load_spec
    from veri_tui.trainer.loop import train
    from veri_tui.trainer.report import RankContext, RankLog

    for p in map(Path, paths):
        env = json.loads(p.read_text()).get("test_env", {})
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        ctx = RankContext.from_env(p.parent)
        log = RankLog(ctx)
        try:
            train(from_spec(load_spec(p), p.parent), ctx, log)
        finally:
            log.close()
            for k, v in before.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
    dist.destroy_process_group()


if __name__ == "__main__":
    _train_each(sys.argv[1:])
