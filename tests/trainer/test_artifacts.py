"""Artifacts written without a full gather (veri_tui/trainer/artifact.py): real 2-rank jobs (gloo).

A full fine-tune's artifact, forced into small shards (`artifact_shard_bytes`), comes out
in the Hugging Face layout (`model-0000k-of-0000n.safetensors` + index), loads untouched with
`from_pretrained`, generates, keeps a tied head tied, and holds exactly the final checkpoint's
tensors; a LoRA artifact holds only the adapter and loads with `PeftModel`. Every artifact's
manifest verifies, and a shard zeroed in place (still a loadable safetensors file) is caught.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from random_model import TINY_TIED, make_random_model
from safetensors import safe_open
from safetensors.torch import load_file
from trainer_jobs import REPO, TINY, checkpoint_tensors, run_many, write_job

from veri_tui.trainer.artifact import verify_artifact

SHARD = 100_000  # bytes: the tiny models' artifacts come out in several files
CASES = {
    # name: (model, zero_stage, precision, lora_rank)
    "full-z3-bf16": ("tiny", 3, "bf16", 0),
    "tied-z2-fp32": ("tied", 2, "fp32", 0),
    "tied-z0-bf16": ("tied", 0, "bf16", 0),
    "lora-z3-bf16": ("tiny", 3, "bf16", 4),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("artifacts")
    models = {"tiny": TINY, "tied": make_random_model(root / "tied-model", TINY_TIED)}
    jobs = {}
    for name, (model, stage, precision, lora) in CASES.items():
        jobs[name] = write_job(
            root / name,
            model=models[model],
            zero_stage=stage,
            precision=precision,
            lora_rank=lora,
            max_steps=2,
            checkpoint_steps=2,
            micro_batch_size=2,
            artifact_shard_bytes=SHARD,
        )
    run_many(list(jobs.values()))
    return {name: job.parent for name, job in jobs.items()}


def _generates(model: torch.nn.Module, out: Path) -> None:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(out)("The fox", return_tensors="pt")["input_ids"]
    gen = model.generate(input_ids=ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > ids.shape[1]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c[3]])
def test_full_artifact_is_sharded_loads_and_holds_the_trained_weights(
    runs: dict[str, Path], name: str
) -> None:
    from transformers import AutoModelForCausalLM

    out, (model_name, _, precision, _) = runs[name] / "output", CASES[name]
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(out.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 and not (out / "model.safetensors").exists()
    assert sorted(set(index["weight_map"].values())) == [s.name for s in shards]
    assert shards[0].name == f"model-00001-of-{len(shards):05d}.safetensors"
    saved = {}
    for shard in shards:
        with safe_open(shard, "pt") as fh:  # safetensors' own checks of each header
            keys = list(fh.keys())
        assert all(index["weight_map"][k] == shard.name for k in keys)
        tensors = load_file(shard)
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        assert size <= SHARD or len(tensors) == 1  # one tensor larger than a shard goes alone
        saved.update(tensors)
    assert index["metadata"]["total_size"] == sum(
        t.numel() * t.element_size() for t in saved.values()
    )
    trained = checkpoint_tensors(runs[name] / "checkpoints" / "step-2")
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    tied = model_name == "tied"
    assert set(saved) == set(trained) - ({"lm_head.weight"} if tied else set())
    for key, value in saved.items():
        assert value.dtype == want and torch.equal(value, trained[key]), key
    model = AutoModelForCausalLM.from_pretrained(out)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    assert json.loads((out / "config.json").read_text())["use_cache"] is True
    _generates(model, out)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lora_artifact_holds_only_the_adapter_and_loads(runs: dict[str, Path]) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = runs["lora-z3-bf16"] / "output"
    saved = load_file(out / "adapter_model.safetensors")
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert not list(out.glob("model*.safetensors"))
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(TINY), out)
    _generates(model, out)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(CASES))
def test_manifest_verifies_and_a_zeroed_file_is_caught(runs: dict[str, Path], name: str) -> None:
    out = runs[name] / "output"
    manifest = json.loads((out / "manifest.json").read_text())
    on_disk = sorted(p.name for p in out.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == on_disk and verify_artifact(out) == []
    weights = sorted(out.glob("model-*.safetensors")) or [out / "adapter_model.safetensors"]
    victim = weights[-1]
    raw = victim.read_bytes()
    body = 8 + int.from_bytes(raw[:8], "little")  # keep the header: still a valid file
    victim.write_bytes(raw[:body] + bytes(len(raw) - body))
    assert all(t.abs().sum() == 0 for t in load_file(victim).values())  # loads without error
    problems = verify_artifact(out)
    assert len(problems) == 1 and victim.name in problems[0] and "sha256" in problems[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_weights_reach_rank0_a_layer_at_a_time_whole(tmp_path: Path) -> None:
    """A model sharded as the trainer shards it (a unit per layer, the root), rows that do
    not split evenly (37 over 2 ranks: 19 + 18; 1 row: 1 + 0): every tensor arrives whole on
    rank 0, in one gather per group (the embedding; each layer; the norm and the head) over
    the job's process group and no point-to-point transfer, and rank 0 holds at most a
    group's rows and the tensor it writes (and the previous group's rows until the
    collective library's thread lets them go: seen on gloo), never the model."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "OUT": str(tmp_path)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    # Each rank's own last lines: a rank that aborted (SIGABRT once in a full suite run, its
    # reason cut off by its peer's longer traceback) says why in its own.
    lines = proc.stderr.splitlines()
    said = {r: [ln for ln in lines if ln.startswith(f"[rank{r}]")][-15:] for r in (0, 1)}
    aborts = [ln for ln in lines if "terminate called" in ln or "what():" in ln]
    assert proc.returncode == 0, (said, aborts, proc.stderr[-1500:])
    r0, r1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert r0["equal"] == [True] * 27 and r1["equal"] == [None] * 27, (r0, r1)
    assert r0["gathers"] == r1["gathers"] == 10, (r0, r1)  # embedding, 8 layers, norm
    layer = r0["largest_group_bytes"]  # a layer's rows on both ranks, padded
    assert 0 < r0["peak_bytes"] <= 2 * layer + r0["largest_tensor_bytes"]
    assert r0["peak_bytes"] < r0["model_bytes"] / 2  # never the model whole
    assert r1["peak_bytes"] <= r1["largest_group_bytes"]  # its own rows (two groups at most)


class _Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 37)
        self.out = torch.nn.Linear(37, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.proj(x))


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(9, 16)
        self.layers = torch.nn.ModuleList([_Layer() for _ in range(8)])
        self.norm = torch.nn.Linear(16, 1)  # 1 row: rank 1 holds none of it


def _gather_worker() -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from veri_tui.trainer.census import Census
    from veri_tui.trainer.gather import gathered, groups

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same module on both ranks
    model = _Model()
    want = [p.detach().clone() for p in model.parameters()]
    mesh = init_device_mesh("cpu", (2,))
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    calls = []
    gather = dist.gather
    dist.gather = lambda *a, **k: calls.append(1) or gather(*a, **k)  # type: ignore[assignment]
    dist.send = dist.recv = None  # type: ignore[assignment]  # any use would fail the run
    named = list(model.named_parameters())
    equal, largest = [], 0
    with Census(exclude=[p.to_local() for _, p in named]) as census:
        # As the artifact consumes it: a plain loop that drops each tensor. (enumerate() kept
        # the previous item in its reused result tuple while the next group was gathered: one
        # tensor more, which with gloo's thread still holding the previous group's rows
        # crossed the bound once in a full suite run.)
        i = 0
        for _, got in gathered(named, rank):
            equal.append(None if got is None else bool(torch.equal(got, want[i])))
            largest = max(largest, want[i].numel() * want[i].element_size())
            del got
            i += 1
    sizes = [sum(-(-p.shape[0] // 2) * 2 * p[0].numel() * 4 for _, p in g)
             for g in groups(named)]  # fmt: skip
    out = {"equal": equal, "gathers": len(calls), "peak_bytes": census.peak(),
           "largest_group_bytes": max(sizes), "largest_tensor_bytes": largest,
           "model_bytes": sum(w.numel() * 4 for w in want)}  # fmt: skip
    (Path(os.environ["OUT"]) / f"rank-{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    _gather_worker()
