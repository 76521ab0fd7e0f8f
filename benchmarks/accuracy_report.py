"""docs/accuracy.md as benchmarks/estimate_accuracy.py writes it: rows, sources, ratios, fit."""

from __future__ import annotations

from typing import Any

import as_ran
from published_runs import compile_speedup

TARGET_TOKENS, TARGET_MEMORY = 0.20, 0.10


def _gb(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / 1e9:.1f}"


def _mark(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" + ("" if abs(ratio - 1) <= target else " **out**")


def _config(run: Any) -> str:
    ac = {"full": "full AC", "none": "no AC", "selective-op": "selective op AC"}[run.checkpointing]
    stage = "FSDP (stage 3)" if run.zero_stage == 3 else "one GPU" if run.gpu_count == 1 else "DDP"
    where = ""
    if run.nodes > 1:  # planned over the network only where the source states it
        link = f"{run.internode_gbps:,.0f} Gb/s each" if run.internode_gbps else "one domain"
        where = f" ({run.nodes} nodes, {link})"
    return (
        f"{as_ran.gpu_for(run).name} x{run.gpu_count}{where}, {stage}, mbs "
        f"{run.micro_batch_size} x ga {run.grad_acc}, seq {run.seq}, {ac}, {run.precision}"
    )


def _corrections(rows: list[dict[str, Any]]) -> list[str]:
    """The rows planned differently from before, their ratios before and after, and each
    correction with the source that states it."""
    changed = [r for r in rows if r["corrections"]]
    fitted = [r["run"].id for r in changed if r["run"].fit]
    out = [
        "Where a source states how its run differs from a plain catalog plan, the run is "
        "planned that way (`benchmarks/as_ran.py`); nothing here is fitted. Before = as "
        "planned before: the catalog GPU, selective checkpointing as none, every GPU in one "
        "NVSwitch domain (same constants). "
        + (
            f"Fitted rows among them: {', '.join(fitted)}."
            if fitted
            else "No fitted row is among them, so the fit is unchanged."
        ),
        "",
        "| run | planned as it ran | recomputed: forward FLOPs / elementwise passes | ratio "
        "before | after |",
        "|---|---|---|---|---|",
    ]
    for r in changed:
        run = r["run"]
        shares = "-"
        if run.checkpointing == "selective-op":
            flops, passes = as_ran.op_sac_recompute(r["info"], run.seq)
            shares = f"{100 * flops:.1f}% / {passes:g}"
        target = 1.0 if run.compiled else TARGET_TOKENS
        out.append(
            f"| `{run.id}` | {', '.join(c.key for c in r['corrections'])} | {shares} "
            f"| {_mark(r['uncorrected_ratio'], target)} | {_mark(r['tokens_ratio'], target)} |"
        )
    out.append("")
    for c in as_ran.CORRECTIONS:
        repo, path, commit = c.source
        out.append(f"- **{c.key}**: {repo} `{path}` (commit {commit[:10]}): \"{c.quote}\" "
                   f"{c.sentence}")  # fmt: skip
    return out


def _table(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| # | run | model (params) | configuration | compiled | measured tok/s/GPU | plan "
        "tok/s/GPU | ratio | before fit | MFU measured / plan | role | memory stated / plan GB "
        "| ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        run = r["run"]
        plan = f"{r['planned_tokens_per_s']:,.0f}"
        if run.compiled:
            plan += f" (x{r['expected_tokens_per_s'] / r['planned_tokens_per_s']:.2f} compiled)"
        mem = f"{_gb(run.peak_memory_bytes)} / {_gb(r['planned_peak_bytes'])}"
        judged = run.memory_modelled and r["memory_ratio"] is not None
        mem_ratio = _mark(r["memory_ratio"], TARGET_MEMORY) if judged else (
            f"({r['memory_ratio']:.2f}, not judged)" if r["memory_ratio"] else "-"
        )  # fmt: skip
        target = 1.0 if run.compiled else TARGET_TOKENS  # compiled rows are not judged
        out.append(
            f"| {i} | `{run.id}` | {run.shape} ({r['parameters'] / 1e9:.2f}B) | {_config(run)} "
            f"| {'yes' if run.compiled else 'no'} | {run.tokens_per_s_per_gpu:,.0f} | {plan} "
            f"| {_mark(r['tokens_ratio'], target)} | {r['old_ratio']:.2f} "
            f"| {100 * r['measured_mfu']:.1f}% / "
            f"{100 * r['planned_mfu']:.1f}% | {'fit' if run.fit else 'held out'} | {mem} "
            f"| {mem_ratio} |"
        )
    return out


def _sources(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, r in enumerate(rows, 1):
        run = r["run"]
        repo, path, commit = run.source
        note = f" {run.note}." if run.note else ""
        out.append(f"{i}. `{run.id}`: {repo} `{path}` (commit {commit[:10]}): `{run.quote}`.{note}")
    return out


def _before(rows: list[dict[str, Any]]) -> str:
    parts = []
    for gpu in ("A100-80GB", "H100-80GB"):
        ratios = [r["old_ratio"] for r in rows if r["run"].gpu == gpu and r["run"].fit]
        parts.append(f"the fitted {gpu} rows planned at {min(ratios):.2f}-{max(ratios):.2f}")
    return ", ".join(parts)


def render(rows: list[dict[str, Any]], fit: dict[str, Any], published: dict[str, int]) -> str:
    """The whole page."""
    from veri_tui.plan import throughput

    eager = [r for r in rows if not r["run"].compiled]
    held = [r for r in eager if not r["run"].fit]
    out_rows = [r for r in eager if abs(r["tokens_ratio"] - 1) > TARGET_TOKENS]
    worst_fit = max(abs(r["tokens_ratio"] - 1) for r in eager if r["run"].fit)
    shapes = sorted({r["run"].shape: r for r in rows}.values(), key=lambda r: r["parameters"])
    lines = [
        "# Estimate accuracy: the plan against published training runs",
        "",
        "Generated by `python benchmarks/estimate_accuracy.py` (data: "
        "`benchmarks/published_runs.py`, every measured figure quoted from its source below). "
        "Each run is planned with `veri_tui.plan.plan(...)` on a header-only checkpoint of its "
        "model's shape, for the catalog GPU, GPU count, micro-batch, accumulation, sequence, "
        "checkpointing, precision and stage it ran with, and its throughput as it ran where "
        "the source states more: the GPU it describes, what selective checkpointing "
        "recomputes, the nodes and network (Corrections, below). Ratio = plan / measured "
        "(above 1: the plan is optimistic). Targets: every eager row within +-20% on "
        "tokens/s; peak memory within +-10% where the source states it for a configuration "
        "the memory model covers. MFU = tokens/s per GPU x the planner's model FLOPs per "
        "token (6N + 12 L x heads x head_dim x seq, no recompute) / the dense bf16 peak of the "
        "GPU planned (the catalog's, or the one the source describes).",
        "",
        "## Runs",
        "",
        *_table(rows),
        "",
        f"Eager rows: {len(eager)}; outside +-20%: {len(out_rows)}"
        + (
            " (" + ", ".join(f"`{r['run'].id}` {r['tokens_ratio']:.2f}" for r in out_rows) + ")"
            if out_rows
            else ""
        )
        + f". Worst fitted row: {100 * worst_fit:.0f}%; held-out eager rows: {len(held)}.",
        "",
        "## Corrections: each run planned as it ran",
        "",
        *_corrections(rows),
        "",
        "## The fit",
        "",
        f"Fitted on the {len(fit['rows'])} rows marked `fit` (llm-foundry's single-node "
        "8-GPU eager runs at sequence 2048 on A100-80GB and H100-80GB, with and without "
        "activation checkpointing): least squares on log(plan / measured), the elementwise "
        "bytes on a grid of 5 and the efficiency per architecture on a grid of 0.01. Held "
        "out: the sequence-8192 and A100-40GB llm-foundry rows, the multi-node ones, and "
        "every other source.",
        "",
        f"- grid optimum: elementwise bytes {fit['elementwise_bytes']}, matmul efficiency "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(fit["efficiency"].items()))
        + f" (rms log ratio {fit['rms']:.3f})",
        f"- in veri_tui/plan/throughput.py: ELEMENTWISE_BYTES = {throughput.ELEMENTWISE_BYTES}, "
        f"MATMUL_EFFICIENCY = {throughput.MATMUL_EFFICIENCY}, default "
        f"{throughput.DEFAULT_MATMUL_EFFICIENCY} (L4, B200: no runs here); "
        f"LAYER_OVERHEAD_S = {throughput.LAYER_OVERHEAD_S}, the communication model and the "
        "optimizer step (veri_tui/plan/optimizer_time.py: the trainer's counted ops and "
        "bytes) are not fitted.",
        "- compiled: the bundled trainer runs its model eagerly (torch.compile builds only its "
        "bf16 optimizer's update on a GPU), so the planner carries eager figures only. The "
        "one same-configuration pair (torchtitan Table 1) gives "
        f"compiled / eager = {compile_speedup():.3f}; compiled rows are shown against the "
        "plan times that factor and are not judged.",
        "- before the fit (MAX_MFU 0.55 on every GPU, no elementwise term; column `before "
        "fit`): " + _before(rows) + ". One efficiency cannot serve both architectures, and "
        "narrow models lose more to memory-bound work.",
        "",
        "## What the data does not cover",
        "",
        "- The bundled trainer runs Hugging Face transformers models (SDPA attention, unfused "
        "RMSNorm and rotary) under FSDP2; the fitted rows ran MosaicML's Composer with its own "
        "fused kernels. How close our eager step comes is what `benchmarks/gpu_check.sh` "
        "measures (docs/trainer.md); it has not run on a GPU yet.",
        '- torchtitan\'s H100 peak is not known ("between SXM and NVL"): the midpoint is '
        "an assumption. At the NVL and SXM ends of that bracket the rows would plan at "
        + "; ".join(
            f"`{r['run'].id}` {r['bracket'][0]:.2f}-{r['bracket'][1]:.2f}"
            for r in rows
            if r["bracket"]
        )
        + ".",
        "- Multi-node rows whose source states no network are planned as one NVSwitch domain "
        "of that many GPUs: "
        + ", ".join(
            f"`{r['run'].id}`" for r in rows if r["run"].nodes > 1 and not r["run"].internode_gbps
        )
        + ". HSDP is planned as FSDP over one 8-GPU node. The inter-node model puts the "
        "NVLink and network parts of a collective one after the other, the conservative end.",
        "- Selective op checkpointing: the matmul share recomputed is counted exactly from the "
        "policy; the elementwise work is counted as one whole pass (the planner's "
        "elementwise term has no finer grain). torchtitan's other selective option (every "
        "k-th layer checkpointed whole, k = selective_ac_option) ran in no row here.",
        "- Memory: the peaks these pretraining runs state are shown with the plan's (its "
        "peak per GPU with the 2 GiB overhead), not judged here: torchtitan's are judged "
        "beside the fine-tuning runs in Peak memory per GPU (below), KempnerForge's ran "
        "compiled or with master-weight precision not stated.",
        "",
        "## Model shapes (header-only checkpoints)",
        "",
        "| shape | parameters here | published |",
        "|---|---|---|",
        *[
            f"| {r['run'].shape} | {r['parameters']:,} | {published.get(r['run'].shape, '-'):,} |"
            if published.get(r["run"].shape)
            else f"| {r['run'].shape} | {r['parameters']:,} | - |"
            for r in shapes
        ],  # fmt: skip
        "",
        "## Sources (the row as read)",
        "",
        *_sources(rows),
        "",
    ]
    return "\n".join(lines)
