"""docs/accuracy.md's peak-memory section, as benchmarks/estimate_accuracy.py writes it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from memory_accuracy import BEFORE, TARGET, summary
from published_memory import HEADERS, MEMORY_FACTS, NOT_EXPRESSED

from veri_tui.plan.gpus import RESERVE_BYTES


def _source(src: tuple[str, str, str] | str) -> str:
    if isinstance(src, str):
        return src
    repo, path, commit = src
    return f"{repo} `{path}` (commit {commit[:10]})"


def _mark(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" + ("" if abs(ratio - 1) <= TARGET else " **out**")


def _config(run: Any) -> str:
    kind = (
        f"QLoRA r{run.lora_rank}" if run.load_in_4bit else
        f"LoRA r{run.lora_rank}" if run.lora_rank else "full"
    )  # fmt: skip
    stage = f"zero_stage {run.zero_stage}" if run.gpu_count > 1 else "one GPU"
    stage += ", cpu_offload" if run.cpu_offload else ""
    return (
        f"{run.shape} {kind} {run.precision}, {run.gpu} x{run.gpu_count} ({stage}), mbs "
        f"{run.micro_batch_size} x seq {run.seq}, {run.checkpointing} checkpointing"
    )


def _line(name: str, s: dict[str, Any]) -> str:
    if not s["n"]:
        return f"{name}: no rows"
    return (
        f"{name}: {s['within10']} of {s['n']} within +-10%, {s['within20']} within +-20%, "
        f"median error {100 * s['median']:.1f}% ({s['low']:.2f}-{s['high']:.2f})"
    )


def _rests_on(rows: list[dict[str, Any]], judged: list[dict[str, Any]]) -> list[str]:
    """What the judged figure rests on, counted from the rows (nothing typed in)."""
    kinds = Counter(r["run"].measured_as for r in judged)
    read = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    alloc = summary(rows, "allocated_ratio")
    return [
        f"**What the judged figure rests on.** The {len(judged)} judged figures are read, in "
        f"their sources' words (Sources below), as: {read}. Each is set against the plan's "
        "allocated bytes "
        f"plus its {RESERVE_BYTES / 2**30:.0f} GiB overhead (CUDA context, cuBLAS and NCCL "
        "workspaces, the caching allocator's slack: `veri_tui/plan/gpus.RESERVE_BYTES`), a "
        "term no run has measured: no source splits its figure into allocated, reserved and "
        "the rest. Read as allocated bytes instead (the plan without the overhead), the same "
        f"plan gives {_line('as allocated', alloc).removeprefix('as allocated: ')}: the "
        "agreement above depends on that unmeasured term being about right. Only a GPU run "
        "measures it, and with it the terms CPU runs cannot: the allocated peak's split into "
        "states, activations (CUDA's attention kernels keep other buffers than the CPU's), "
        "the FSDP2 units in flight (prefetch on CUDA streams) and AdamW's step temporary "
        "(its foreach path), the reserved bytes beyond allocated (fragmentation; "
        "`expandable_segments`), and the device's figure beyond reserved (the overhead). "
        "The trainer records all of them per rank on CUDA (veri_tui/trainer/devmem.py: allocated, "
        "reserved, allocator retries, NVML or nvidia-smi; docs/trainer.md); a GPU canary "
        "(`veri-tui launch --canary`, docs/canary.md) sets each beside the plan's term, "
        "overhead included, and folds them into calibration; `benchmarks/gpu_check.sh` "
        "sets them beside the plan's for its runs. On CPU only the states are measured as "
        "CUDA would hold them; the canary's CPU census of activations, loss, units in "
        "flight and the optimizer step counts CPU storages, and its overhead is the "
        "process's resident set beyond the tensors, not a GPU's. None of these has run on a "
        "GPU yet.",
    ]


def render(rows: list[dict[str, Any]]) -> list[str]:
    """The section's lines."""
    judged = [r for r in rows if r["run"].judged]
    now, bundled, old = summary(rows), summary(rows, "bundled_ratio"), summary(rows, "before_ratio")
    out = [
        "## Peak memory per GPU",
        "",
        "Published, measured peaks of fine-tuning runs (`benchmarks/published_memory.py`, every "
        "figure and fact quoted below) against the plan's peak (docs/planning.md, Peak "
        "memory): states + activations + logits and loss + FSDP2 units in flight (or AdamW's "
        "step) + the 2 GiB overhead, set against the device's or the allocator's reserved "
        "figure. `bundled`: planned as a user plans the run with veri-tui's knobs (the "
        "bundled trainer's memory). `as ran`: the same plan with what the source states about "
        "how that run held memory (Facts, below), every other term the plan's own; the "
        "judged figure. `before`: the planner before issue 19 (commit "
        f"{BEFORE}, states + activations + stage-3 gathers, selective planned as checkpointing "
        "on, load_in_4bit ignored). Ratio = plan / measured. Nothing here is fitted.",
        "",
        f"**Summary.** {_line('As ran', now)}. {_line('Bundled plan', bundled)}. "
        f"{_line('Before', old)}.",
        "",
        *_rests_on(rows, judged),
        "",
        "| # | run | configuration | measured GB | as | before | bundled | as ran GB | ratio "
        "| facts |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(judged, 1):
        run = r["run"]
        out.append(
            f"| {i} | `{run.id}` | {_config(run)} | {run.measured_bytes / 1e9:.1f} | "
            f"{run.measured_as} | {_mark(r['before_ratio'])} | {_mark(r['bundled_ratio'])} | "
            f"{r['as_ran'] / 1e9:.1f} | {_mark(r['ratio'])} | {', '.join(run.facts)} |"
        )
    out += ["", "### Facts: each run as it held memory", ""]
    for key, f in MEMORY_FACTS.items():
        out.append(f'- **{key}**: {_source(f.source)}: "{f.quote}" {f.sentence}')
    out += ["", "### Runs not judged", ""]
    for r in rows:
        run = r["run"]
        if run.judged:
            continue
        alt = f", with an fp32 loss {r['alt_ratio']:.2f}" if r["alt_ratio"] else ""
        facts = f" (facts: {', '.join(run.facts)})" if run.facts else ""
        note = f" {run.note}." if run.note else ""
        out.append(
            f"- `{run.id}` ({_config(run)}; measured {run.measured_bytes / 1e9:.1f} GB, "
            f"{run.measured_as}): planned {r['ratio']:.2f} as read{facts}{alt}, bundled "
            f"{r['bundled_ratio']:.2f}; not judged: {run.reason}. {_source(run.source)}: "
            f"`{run.quote}`.{note}"
        )
    for u in NOT_EXPRESSED:
        out.append(f'- `{u.id}` ({u.measured}): {_source(u.source)}: "{u.quote}". '
                   f"{u.kind}: {u.reason}.")  # fmt: skip
    out += ["", "### Sources (the rows as read)", ""]
    for src, header in HEADERS.items():
        out.append(f'- {_source(src)}, of every row below: "{header}"')
    for r in judged:
        run = r["run"]
        note = f" {run.note}." if run.note else ""
        out.append(f"- `{run.id}`: {_source(run.source)}: `{run.quote}`{note}")
    return out
