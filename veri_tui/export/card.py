"""The export's model card (README.md): what was trained, on what, at what cost, and how
it answers.

The fields come from the job's own files, never re-estimated: the plan lines the trainer
logged (job.json `spec.plan_header`), the knobs as resolved, the data's hash (the token
cache's key, `tokens/meta.json`: sha256 over the sources' bytes and options, veri_tui/jobfolder/
source.py `fingerprint`), the losses of metrics.jsonl, the predicted and measured cost
(job.json `predicted` and `measured`, the GPU-hours its attempts held) and the smoke
generation beside the base's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from veri_tui.jobfolder.contract.layout import METRICS, TOKENS
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.plan.cost import money_text

KNOBS = ("lora_rank", "lora_alpha", "lora_target_modules", "lora_dropout", "learning_rate",
         "lr_scheduler", "warmup_steps", "max_steps", "num_epochs", "max_seq_length",
         "packing", "precision", "seed")  # fmt: skip


def data_hash(job_dir: Path) -> str | None:
    """sha256 of the datasets the job was tokenized from (its token cache's key)."""
    try:
        meta = json.loads((job_dir / TOKENS / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    value = meta.get("key", {}).get("dataset")
    return str(value) if value else None


def last_losses(job_dir: Path) -> dict[str, float]:
    """The last logged `loss` and `eval_loss`, and the step they were logged at."""
    out: dict[str, float] = {}
    try:
        lines = (job_dir / METRICS).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        for key in ("loss", "eval_loss", "step"):
            if isinstance(row.get(key), (int, float)):
                out[key] = row[key]
    return out


def cost_lines(rec: JobRecord, gpu_s: float | None) -> list[str]:
    """Predicted beside measured: GPU-hours, tokens/s, peak memory."""
    predicted, measured = rec.get("predicted") or {}, rec.get("measured") or {}
    out = []
    if predicted.get("gpu_hours") is not None:
        price = predicted.get("price")
        usd = f" ({money_text(price)})" if price is not None else ""
        out.append(f"- predicted: {predicted['gpu_hours']:.4g} GPU-hours{usd} on "
                   f"{predicted.get('gpu', '?')}")  # fmt: skip
    if gpu_s is not None:
        out.append(f"- measured: {gpu_s / 3600:.4g} GPU-hours held ({gpu_s:,.0f} "
                   "GPU-seconds over its attempts)")  # fmt: skip
    if measured.get("tokens_per_s") is not None:
        out.append(f"- measured throughput: {measured['tokens_per_s']:,.0f} tokens/s on "
                   f"{measured.get('ranks', '?')} x {measured.get('gpu', '?')}")  # fmt: skip
    if measured.get("peak_bytes") is not None:
        out.append(f"- measured peak memory: {measured['peak_bytes'] / 2**30:.2f} GiB per "
                   f"rank ({measured.get('peak_source', '?')})")  # fmt: skip
    return out or ["- not recorded"]


def model_card(rec: JobRecord, job_dir: Path, form: str, base: str, smoke: list[dict[str, str]],
               gpu_s: float | None) -> str:  # fmt: skip
    """The README.md of an export. `form`: merged, adapter or full."""
    spec = rec.get("spec") or {}
    hp = spec.get("hyperparameters") or {}
    library = "peft" if form == "adapter" else "transformers"
    datasets = [d.get("path") for d in spec.get("datasets") or [] if isinstance(d, dict)]
    losses = last_losses(job_dir)
    model = str(spec.get("model"))
    hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", model) and not Path(model).exists()
    header = [f"base_model: {json.dumps(model)}"] if hub_id else []  # the Hub checks it
    method = spec.get("method", "sft_text")
    merged = f" (LoRA merged into {base})" if form == "merged" else ""
    lines = ["---", f"library_name: {library}", *header, "tags:", "- veri-tui", f"- {method}",
             "---", "", f"# {method} of {model} (job {rec.get('job_id')})", "",
             f"Exported by `veri-tui export` as a {form} checkpoint{merged}.", "",
             "## Plan", "", "```", *spec.get("plan_header", []), "```", "",
             "| knob | value |", "|---|---|"]  # fmt: skip
    lines += [f"| {k} | {json.dumps(hp[k])} |" for k in KNOBS if k in hp]
    lines += ["", "## Data", ""]
    lines += [f"- {d}" for d in datasets or [spec.get("dataset")]]
    lines += [
        f"- sha256 of the data (the token cache's key): {data_hash(job_dir) or 'not recorded'}"
    ]
    lines += ["", "## Result", ""]
    if "loss" in losses:
        lines.append(
            f"- step {losses.get('step', '?'):g}: loss {losses['loss']:.4f}"
            + (f", eval_loss {losses['eval_loss']:.4f}" if "eval_loss" in losses else "")
        )
    lines += ["", "## Cost", "", *cost_lines(rec, gpu_s), "", "## Smoke generation", ""]
    if not smoke:
        lines.append("Not run: the job's prompts are not on this machine.")
    for s in smoke:
        lines += [
            "```",
            s["prompt"],
            "```",
            f"- base: {s['base']!r}",
            f"- tuned: {s['tuned']!r}",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"
