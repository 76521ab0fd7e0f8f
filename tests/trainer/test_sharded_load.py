"""Sharded loading (veri_tui/trainer/loading.py) against `from_pretrained`, on 2 CPU ranks (gloo).

- Equal: on a random-weight tied model stored in several safetensors files, on the
  bundled tiny model (an fp32 file loaded as bf16) and on the tiny mixture of experts (its
  routed experts fused by transformers 5 from per-expert tensors), every layout (DDP, FSDP2
  stages 2/3, LoRA, fp32 masters, the DPO reference) loads bit for bit what
  `from_pretrained` gives: weights, rotary buffers, the tie, the seeded LoRA init. And a job
  trains to the same losses.
- Small: each rank's resident memory while loading (VmHWM, reset just before, against VmRSS
  before) is about its shard, not the model. A ~29M-parameter random model (58 MB in bf16):
  at zero_stage 3 on 2 ranks a rank reads 29 MB, so the load must stay under 0.75 x the
  model's bytes (the rest is margin for allocator and page-table noise, seen at a few MB);
  `from_pretrained` on the same rank holds the whole model and must exceed 0.9 x (the check
  that this measurement can fail). Random weights: zero-filled files cost no memory.

Run as a script under torchrun, this file is the worker (`_worker`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from random_model import SMALL, TINY_TIED, make_random_model
from trainer_jobs import REPO, TINY, TINY_MOE, metrics, run_many, write_job

LAYOUTS = ["0 0 bf16", "2 0 fp32", "3 0 bf16", "3 4 fp32", "2 4 bf16"]  # stage lora precision


def _torchrun(out: Path, *args: str, timeout: float = 300) -> list[dict]:
    """Run the worker on 2 ranks; the JSON lines each rank wrote to out/rank-<r>.jsonl."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "ROWS_DIR": str(out)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
    proc = subprocess.run(
        [*cmd, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for f in sorted(out.glob("rank-*.jsonl")) for ln in f.read_text().splitlines()]
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "tied": make_random_model(root / "tied", TINY_TIED, shard="200KB"),
        "small": make_random_model(root / "small", SMALL),
    }


@pytest.fixture(scope="module")
def equal_rows(models: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """{model: its rows}: every layout of the three models compared in one torchrun (a
    torchrun start, two ranks importing torch and transformers, costs more than the loads)."""
    # tiny-moe: transformers 5 fuses its per-expert tensors into 3-D parameters; the sharded
    # loader fills each rank's experts from the per-expert files (veri_tui/trainer/experts.py).
    paths = {"tied": models["tied"], "tiny": TINY, "tiny-moe": TINY_MOE}
    rows = _torchrun(tmp_path_factory.mktemp("equal"), "equal", *LAYOUTS, "--",
                     *(f"{name}={path}" for name, path in paths.items()))  # fmt: skip
    return {name: [r for r in rows if r["model"] == name] for name in paths}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("model", ["tied", "tiny", "tiny-moe"])
def test_every_layout_loads_what_from_pretrained_loads(
    models: dict, equal_rows: dict[str, list[dict]], model: str
) -> None:
    if model == "tied":
        assert len(list(models["tied"].glob("model-*-of-*.safetensors"))) > 1  # several files
    rows = equal_rows[model]
    assert len(rows) == 2 * len(LAYOUTS)
    for row in rows:
        assert row["differ"] == [] and row["tensors"] > 0, row
        assert row["tied"] == (model == "tied") and row["training"], row


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_rank_loads_its_shard_not_the_model(models: dict, tmp_path: Path) -> None:
    got = []
    for load in ("meta", "from_pretrained"):  # one process each: nothing freed is reused
        (tmp_path / load).mkdir()
        got += _torchrun(tmp_path / load, "memory", str(models["small"]), load)
    rows = {(r["mode"], r["rank"]): r for r in got}
    model_bytes = rows["meta", 0]["model_bytes"]
    assert model_bytes > 50e6
    for rank in (0, 1):
        assert rows["meta", rank]["load_bytes"] < 0.75 * model_bytes, rows
        assert rows["from_pretrained", rank]["load_bytes"] > 0.9 * model_bytes, rows


@pytest.mark.slow
@pytest.mark.trial
@pytest.mark.timeout(600)
def test_training_losses_equal_the_from_pretrained_path(tmp_path: Path) -> None:
    cases = {"z3-lora": (3, 4, "sft_text"), "z2-dpo-full": (2, 0, "dpo")}
    jobs: dict[str, list[Path]] = {"meta": [], "from_pretrained": []}
    for mode, loads in jobs.items():  # all four in one torchrun, each with its own VERI_LOAD
        for name, (stage, lora, method) in cases.items():
            loads.append(
                write_job(
                    tmp_path / mode / name,
                    method=method,
                    dataset="dpo" if method == "dpo" else "text",
                    zero_stage=stage,
                    lora_rank=lora,
                    max_steps=3,
                    micro_batch_size=2,
                    env={"VERI_LOAD": mode},
                )
            )
    run_many([*jobs["meta"], *jobs["from_pretrained"]])
    losses = {
        mode: [[m["loss"] for m in metrics(j.parent)] for j in js] for mode, js in jobs.items()
    }
    assert losses["meta"] == losses["from_pretrained"] and len(losses["meta"][0]) == 3


def _worker(argv: list[str]) -> None:
    """torchrun mode: `equal LAYOUT... -- NAME=PATH...` or `memory PATH MODE`; one JSON line
    per case."""
    import torch.distributed as dist

    from veri_tui.trainer.measure import vm_status
    from veri_tui.trainer.model import build_policy
    from veri_tui.trainer.parallelize import init_runtime, wrap_policy

    mode = argv[0]

    def emit(row: dict) -> None:
        out = Path(os.environ["ROWS_DIR"]) / f"rank-{os.environ['RANK']}.jsonl"
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    rt = init_runtime(_cfg(3, 0, "bf16", Path(".")))
    rank = dist.get_rank()
    if mode == "memory":
        path, load = Path(argv[1]), argv[2]
        os.environ["VERI_LOAD"] = load
        c = _cfg(3, 0, "bf16", path)
        build_policy(c, path)  # warm-up (not filled): imports, first-use caches
        before = vm_status()["VmRSS"]
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        model = wrap_policy(build_policy(c, path), c, rt)
        peak = vm_status()["VmHWM"]
        nbytes = sum(t.numel() * t.element_size() for t in _whole(model).values())
        emit({"mode": load, "rank": rank, "load_bytes": peak - before, "model_bytes": nbytes})
        dist.destroy_process_group()
        return
    split = argv.index("--")
    for name, path in (arg.split("=", 1) for arg in argv[split + 1 :]):
        for layout in argv[1:split]:
            emit({**_compare(layout, Path(path), rt, rank), "model": name})
    dist.destroy_process_group()


def _cfg(stage: int, lora: int, precision: str, path: Path) -> Any:
    """The TrainConfig of one layout of the model at ``path`` on this world."""
    from veri_tui.trainer.config import TrainConfig

    c = TrainConfig(Path("."), "sft_text", str(path), Path("d"), Path("."))
    c.zero_stage, c.lora_rank, c.lora_alpha, c.precision = stage, lora, 2.0 * lora, precision
    c.data_parallel_size = int(os.environ["WORLD_SIZE"])
    return c


def _whole(m: Any) -> dict[str, Any]:
    """Every parameter and buffer of ``m``, DTensors gathered whole."""
    ts = [*m.named_parameters(), *m.named_buffers()]
    return {n: (t.full_tensor() if hasattr(t, "full_tensor") else t).detach() for n, t in ts}


def _compare(layout: str, path: Path, rt: Any, rank: int) -> dict:
    """One layout of one model loaded both ways on this rank: the tensors that differ."""
    import torch

    from veri_tui.trainer.model import build_policy, build_reference
    from veri_tui.trainer.parallelize import unwrap, wrap_policy, wrap_reference

    stage, lora, precision = layout.split()
    c = _cfg(int(stage), int(lora), precision, path)
    got = {}
    for load in ("meta", "from_pretrained"):
        os.environ["VERI_LOAD"] = load
        torch.manual_seed(42)
        policy = unwrap(wrap_policy(build_policy(c, path), c, rt))
        ref = wrap_reference(build_reference(path), c, rt) if not c.lora_rank else None
        hf = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        tied = hf.lm_head.weight is hf.model.embed_tokens.weight
        got[load] = (_whole(policy), _whole(ref) if ref else {}, tied, policy.training)
    (a, ra, tied, training), (b, rb, tied_b, _) = got["meta"], got["from_pretrained"]
    differ = sorted(set(a) ^ set(b)) + sorted(set(ra) ^ set(rb))
    for x, y in ((a, b), (ra, rb)):
        differ += [k for k in x if k in y and not torch.equal(x[k], y[k])]
    row = {"layout": layout, "rank": rank, "tensors": len(a), "differ": differ}
    return {**row, "tied": tied and tied_b, "training": training}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    _worker(sys.argv[1:])
    # The work is done and written: leave without the interpreter's finalization, where a
    # gloo rank can abort after a clean destroy_process_group (SIGABRT, "terminate called
    # without an active exception"; docs/reliability.md, Known defects).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
