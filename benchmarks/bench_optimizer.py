"""The bf16 AdamW's step against torch's foreach AdamW: ops dispatched and CPU time per step.

    python benchmarks/bench_optimizer.py [--old DIR] [--threads N] [--steps K] [--layers L]
                                         [--fp32] [--only TEXT ...]

The parameters of a 28-layer Qwen3-shaped model (hidden 448, MLP 1,536, 8 heads of 64 over
4 KV heads, vocabulary 32,000, tied: 310 bf16 tensors, 91,435,456 parameters), random
weights (std 0.02) and one set of random gradients (std 1e-3) given to every optimizer:
torch's AdamW (foreach, on the bf16 weights: what precision bf16 would run without
stochastic rounding), veri_tui/trainer/adamw.py's StochasticAdamW compiled (the fused kernel)
and eager (its fallback batches), and with `--old DIR` the adamw.py of another checkout (a
`git worktree` of the commit before, e.g. 5e6f786). `--threads N`: torch's intra-op threads
(1 by default: the issue's figures; the host step of cpu_offload runs on a rank's share of
the cores, `--threads` = that share). Each optimizer makes its states in a first step (and
compiles), then runs K steps.

ops = the aten ops dispatched from Python per step (the profiler's top-level aten events: a
foreach op counts once) plus the kernels a compiled graph runs; on a GPU each is at least one
kernel launch. B/elem = the bytes the step's ops read and write per parameter (each op's
tensors, views excluded; a compiled kernel's inputs and outputs): the memory traffic a GPU
step moves. CPU time = process time per step (time.process_time), the median of K; wall
= its elapsed time, and s/GB the wall seconds per GB of bf16 weights updated (with the
rank's threads: the offload host step's planning figure).
Results: docs/trainer.md, Optimizer step.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from veri_tui.trainer.adamw_kernel import KERNEL_BYTES
from veri_tui.trainer.adamw_native import KERNEL

DIMS = {"hidden_size": 448, "intermediate_size": 1536, "num_hidden_layers": 28,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
        "vocab_size": 32000, "tie_word_embeddings": True}  # fmt: skip


def shapes(layers: int, **dims: int) -> list[torch.Size]:
    """The trained parameters' shapes, in the model's order (built on the meta device);
    `dims` replace DIMS' (a smaller model for tests)."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**{**DIMS, **dims, "num_hidden_layers": layers})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return [p.shape for p in model.parameters()]


def make_params(sizes: list[torch.Size]) -> list[torch.nn.Parameter]:
    """Random bf16 weights (std 0.02) with random gradients (std 1e-3), the same each call."""
    g = torch.Generator().manual_seed(0)
    params = []
    for s in sizes:
        p = torch.nn.Parameter(torch.randn(s, generator=g).mul_(0.02).bfloat16())
        p.grad = torch.randn(s, generator=g).mul_(1e-3).bfloat16()
        params.append(p)
    return params


def fp32(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """fp32 copies of bf16 parameters, with their gradients."""
    out = []
    for p in params:
        q = torch.nn.Parameter(p.detach().float())
        q.grad = p.grad.float() if p.grad is not None else None
        out.append(q)
    return out


def count_ops(step: Callable[[], Any]) -> int:
    """Top-level aten ops plus compiled kernels run by one call of `step`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    n = 0
    for e in prof.events():
        parent = e.cpu_parent.name if e.cpu_parent is not None else ""
        if e.name.startswith("aten::") and not parent.startswith("aten::"):
            n += 1
        elif "cpp_fused" in e.name or e.name.startswith("triton_") or e.name == KERNEL:
            n += 1  # a compiled kernel (inductor's named when enable_kernel_profile is on)
    return n


class ByteCount(TorchDispatchMode):  # type: ignore[misc]
    """Bytes each dispatched op reads and writes: its tensor arguments (read), the ones it
    writes in place (again, written; copy_'s destination only written), or else its results
    (written); views move nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:  # fmt: skip
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:
            return out
        schema = func._schema.arguments
        given = [*zip(schema, args, strict=False), *((a, kwargs[a.name]) for a in schema
                                                    if a.name in kwargs)]  # fmt: skip
        written = [v for a, v in given if a.alias_info is not None and a.alias_info.is_write]
        read = [v for a, v in given if func is not torch.ops.aten.copy_.default
                or a.name != "self"]  # fmt: skip
        self.bytes += _nbytes(read) + (_nbytes(written) if written else _nbytes(out))
        return out


def _nbytes(tree: Any) -> int:
    return sum(t.nbytes for t in tree_leaves(tree) if isinstance(t, torch.Tensor))


def measure(make: Callable[[list[Any]], Any], params: list[Any], steps: int) -> dict[str, Any]:
    opt = make(params)
    t0 = time.perf_counter()
    opt.step()  # states made (and the kernel compiled)
    first = time.perf_counter() - t0
    ops = count_ops(opt.step)
    with ByteCount() as counted:
        opt.step()
    moved = counted.bytes
    way = getattr(opt, "way", None)
    if way == "compiled":  # under a dispatch mode it runs its ops eagerly: count its kernel
        moved = KERNEL_BYTES * sum(p.numel() for p in params)
    elif way == "native":  # the C kernel, unseen by the mode
        moved += KERNEL_BYTES * sum(p.numel() for p in params)
    cpu, wall = [], []
    for _ in range(steps):
        t, w = time.process_time(), time.perf_counter()
        opt.step()
        cpu.append(time.process_time() - t)
        wall.append(time.perf_counter() - w)
    return {"ops": ops, "cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall),
            "first_s": first, "bytes": moved}  # fmt: skip


def load_old(folder: Path) -> Any:
    """adamw.py of another checkout, loaded by path (it imports only torch)."""
    spec = importlib.util.spec_from_file_location(
        "old_adamw", folder / "veri_tui" / "trainer" / "adamw.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="a checkout whose adamw.py to compare")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per optimizer")
    parser.add_argument("--layers", type=int, default=28, help="decoder layers")
    parser.add_argument("--fp32", action="store_true", help="also torch's AdamW on fp32 copies")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only the optimizers whose name holds TEXT (repeatable)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # Names each compiled kernel in the profile, so the count sees it (no cost unprofiled).
    torch._inductor.config.cpp.enable_kernel_profile = True
    from veri_tui.trainer.adamw import WAYS, StochasticAdamW

    sizes = shapes(args.layers)
    total = sum(s.numel() for s in sizes)
    gb = 2 * total / 1e9  # bf16 weights updated per step
    kw = {"lr": 1e-4, "weight_decay": 0.01}
    runs: dict[str, Callable[[list[Any]], Any]] = {
        "torch AdamW (foreach)": lambda p: torch.optim.AdamW(p, foreach=True, **kw),
    }
    if args.old:
        old = load_old(args.old)
        runs["bf16 AdamW before"] = lambda p: old.StochasticAdamW(p, seed=1, **kw)
    for way in WAYS:
        runs[f"bf16 AdamW {way}"] = lambda p, w=way: StochasticAdamW(p, seed=1, way=w, **kw)
    if args.fp32:  # fp32 master weights: what precision fp32 and cpu_offload's host runs
        runs["torch AdamW fp32"] = lambda p: torch.optim.AdamW(fp32(p), foreach=True, **kw)
    print(f"# {len(sizes)} bf16 tensors, {total:,} parameters ({gb:.3f} GB of weights); "
          f"{args.threads} thread(s); median of {args.steps} steps")  # fmt: skip
    if args.only:
        runs = {k: v for k, v in runs.items() if any(t in k for t in args.only)}
    base: dict[str, Any] | None = None
    print(f"{'optimizer':<24}{'ops/step':>10}{'x':>7}{'CPU ms':>10}{'x':>7}{'wall ms':>10}"
          f"{'s/GB':>8}{'B/elem':>8}{'first s':>9}")  # fmt: skip
    for name, make in runs.items():
        got = measure(make, make_params(sizes), args.steps)
        base = base or got
        print(f"{name:<24}{got['ops']:>10,}{got['ops'] / base['ops']:>7.2f}"
              f"{1e3 * got['cpu_s']:>10.0f}{got['cpu_s'] / base['cpu_s']:>7.2f}"
              f"{1e3 * got['wall_s']:>10.0f}{got['wall_s'] / gb:>8.3f}"
              f"{got['bytes'] / total:>8.1f}{got['first_s']:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
