"""Host memory of `veri-tui export --merge`: a LoRA merged into a Qwen3-0.6B-shaped base.

    python benchmarks/bench_export.py [--model-dir /tmp/...] [--shard 300MB] [--rank 16]

Builds a random-weight bf16 Qwen3-0.6B-shaped model (596M parameters, ~1.2 GB, in shards
of `--shard`; cached under /tmp; nothing downloaded) and a random LoRA adapter of `--rank`
on every attention and MLP projection (B non-zero, so every adapted weight changes), then
merges them in a fresh process (veri_tui/trainer/merge.py `merge_lora`, what export --merge
runs) and reads that process's VmHWM from /proc/self/status: after its imports
and the adapter's load (the baseline), and after the merge. The growth is what the merge
itself held at its peak; the claim (docs/export.md) is that it stays near the largest
tensor's fp32 copies, far below one shard, and does not grow with the model. It also
checks one merged weight against W + (alpha / r) B A. Results go into docs/export.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "trainer"))

from random_model import QWEN3_06B, make_random_model  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKED = "model.layers.3.mlp.down_proj.weight"


def make_adapter(base: Path, folder: Path, rank: int) -> Path:
    """A random peft LoRA adapter over every linear of `base` (fp32, as the trainer's)."""
    import torch
    from safetensors.torch import save_file

    from veri_tui.trainer.weights import checkpoint_entries

    torch.manual_seed(1)
    tensors = {}
    for name, entry in checkpoint_entries(base).items():
        if name.rsplit(".", 2)[-2] in LINEARS:
            out, inp = entry.shape
            stem = "base_model.model." + name.removesuffix(".weight")
            tensors[f"{stem}.lora_A.weight"] = torch.randn(rank, inp) * 0.01
            tensors[f"{stem}.lora_B.weight"] = torch.randn(out, rank) * 0.01
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, folder / "adapter_model.safetensors")
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": LINEARS}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def child(base: Path, adapter: Path, out: Path) -> None:
    """The merge in this (fresh) process; prints its VmHWM figures as one JSON line."""
    from veri_tui.trainer.measure import vm_status
    from veri_tui.trainer.merge import adapter_deltas, merge_lora

    adapter_deltas(adapter)  # the adapter's load is in the baseline: its size is its own
    before = vm_status()["VmHWM"]
    t0 = time.perf_counter()
    files = merge_lora(base, adapter, out)
    took = time.perf_counter() - t0
    print(json.dumps({"hwm_before": before, "hwm_after": vm_status()["VmHWM"],
                      "seconds": took, "files": len(files)}))  # fmt: skip


def check(base: Path, adapter: Path, out: Path, rank: int) -> float:
    """Largest |merged - (W + 2 B A)| of one weight, in units of its bf16 spacing."""
    import torch
    from safetensors import safe_open

    from veri_tui.trainer.weights import checkpoint_entries, read_rows

    def tensor(folder: Path, name: str) -> torch.Tensor:
        entry = checkpoint_entries(folder)[name]
        t = torch.empty(entry.shape, dtype=entry.dtype)
        read_rows(entry, t, 0)
        return t

    with safe_open(adapter / "adapter_model.safetensors", "pt") as f:
        stem = "base_model.model." + CHECKED.removesuffix(".weight")
        a, b = f.get_tensor(f"{stem}.lora_A.weight"), f.get_tensor(f"{stem}.lora_B.weight")
    want = (tensor(base, CHECKED).float() + 2.0 * b @ a).to(torch.bfloat16)
    return float((tensor(out, CHECKED) - want).abs().max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", type=Path, default=Path("/tmp/veri-bench-export/qwen3-0.6b"))
    p.add_argument("--shard", default="300MB")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--child", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child)
        return
    base = make_random_model(args.model_dir, QWEN3_06B, shard=args.shard)
    adapter = make_adapter(base, args.model_dir.parent / f"adapter-r{args.rank}", args.rank)
    out = args.model_dir.parent / "merged"
    out.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, __file__, "--child", str(base), str(adapter), str(out)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    from veri_tui.trainer.weights import checkpoint_entries

    entries = checkpoint_entries(base)
    shard_sizes = [f.stat().st_size for f in base.glob("model*.safetensors")]
    largest = max(e.dtype.itemsize * _numel(e.shape) for e in entries.values())
    grew = got["hwm_after"] - got["hwm_before"]
    mb = 1e6
    print(
        f"base: {sum(shard_sizes) / mb:,.0f} MB in {len(shard_sizes)} shards (largest "
        f"{max(shard_sizes) / mb:,.0f} MB); largest tensor {largest / mb:,.0f} MB; adapter "
        f"rank {args.rank} {(adapter / 'adapter_model.safetensors').stat().st_size / mb:,.1f} MB"
    )
    print(f"merge: {got['seconds']:.1f} s, {got['files']} files; VmHWM "
          f"{got['hwm_before'] / mb:,.0f} MB after imports and adapter -> "
          f"{got['hwm_after'] / mb:,.0f} MB after the merge: "
          f"+{grew / mb:,.0f} MB = {grew / max(shard_sizes):.2f} x the largest shard, "
          f"{grew / largest:.2f} x the largest tensor")  # fmt: skip
    worst = check(base, adapter, out, args.rank)
    print(f"check: {CHECKED} max |merged - bf16(W + 2 B A)| = {worst:.3g}")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


if __name__ == "__main__":
    main()
