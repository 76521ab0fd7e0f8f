"""The canary's gate: what K measured steps say of the whole job, and go or no-go.

A job launched with `--canary K` (spec `canary`: steps, max_cost, max_hours, headroom) runs
its first K steps on the longest samples, saves a checkpoint and loads it back
(veri_tui/trainer/canary.py); each rank then writes `canary/rank-<r>.json` and waits for
`canary/decision.json`. The supervisor (veri_tui/jobfolder/supervise.py) judges once every rank of
its node has written: `judge` sets each measured term beside the plan's (job.json
`predicted`), extrapolates the whole job's time and cost with a band, and decides:

- cost: the estimate's price at most `max_cost` (dollars; the plan's price per GPU-hour);
- hours: the estimate's wall time at most `max_hours`;
- memory: every rank's device peak within (1 - headroom) of what a rank has (the GPU's
  memory; on CPU the host's memory over its ranks), no allocator retry, and the resume check.

The band: low = the job's tokens at the fastest steady step's tokens/s; estimate = at the
median; high = every step as slow as the slowest steady one (the canary's steps are the
longest, so real steps are faster). Set-up, the canary's own steps and the planned
checkpoint saves are added to each. The gate judges the estimate; the band is shown.

The decision goes into job.json (`canary`), into the rank-0 log as the table
(`canary_lines`) and into `canary/decision.json` for the ranks. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from veri_tui.jobfolder.canary.canarytable import canary_lines, money
from veri_tui.jobfolder.canary.canaryterms import memory_terms, num, optimizer_time, rank_max
from veri_tui.jobfolder.contract.atomic import write_json_atomic
from veri_tui.jobfolder.contract.layout import CANARY
from veri_tui.jobfolder.contract.record import now_iso

GO, NO_GO = "go", "no-go"
DEFAULT_STEPS = 3
DEFAULT_HEADROOM = 0.10
#: The knob that moves each memory term most (veri_tui/plan/peak.py names it beside the plan).
KNOB_FOR_PART = {
    "states": "zero_stage, lora_rank or gpu_count",
    "activations": "activation_checkpointing or micro_batch_size",
    "logits": "micro_batch_size or max_seq_length",
    "in_flight": "zero_stage 2 (no regathering) or lora_rank",
    "optimizer_step": "lora_rank or gpu_count (zero_stage 3)",
    "overhead": "nothing (fixed per GPU)",
}
#: What shortens the run (more GPUs do), and what cuts its cost (more GPUs do not: the
#: GPU-hours stay the same at best, and grow with any scaling loss).
TIME_KNOB = "lower max_steps or num_epochs, or add GPUs"
COST_KNOB = ("lower max_steps or num_epochs, or a cheaper GPU type (more GPUs shorten the run, "
             "not its cost)")  # fmt: skip


def rank_file(job_dir: Path, rank: int) -> Path:
    """`canary/rank-<r>.json`: what rank ``rank`` measured in the canary's steps."""
    return Path(job_dir) / CANARY / f"rank-{rank}.json"


def decision_file(job_dir: Path) -> Path:
    """`canary/decision.json`: the gate's answer the ranks wait for."""
    return Path(job_dir) / CANARY / "decision.json"


def outcome_file(job_dir: Path) -> Path:
    """`canary/outcome.json`: what the ranks did (every node's agree: one no-go stops all)."""
    return Path(job_dir) / CANARY / "outcome.json"


def read_decision(job_dir: Path) -> dict[str, Any] | None:
    """The gate's answer, None until it is written (or while it is unreadable)."""
    try:
        data = json.loads(decision_file(job_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "go" in data else None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def extrapolate(first: Mapping[str, Any], price: float | None, gpus: int) -> dict[str, Any]:
    """The whole job's hours and cost (estimate and band) from rank 0's steady steps, at
    ``price`` per GPU-hour (None: hours only)."""
    rates = [float(r) for r in first.get("rates") or [] if r]
    warm = int(first.get("warmup_steps") or 0)
    steady = rates[warm:] or rates
    step_s = [float(s) for s in first.get("step_s") or []]
    slow = max(step_s[warm:] or step_s or [0.0])
    tokens = float(first.get("tokens_total") or 0)
    total, done = int(first.get("total_steps") or 0), len(step_s)
    fixed = sum(float(v) for v in (first.get("setup_s") or {}).values()) + sum(step_s)
    fixed += float(first.get("save_s") or 0) * int(first.get("saves_planned") or 0)
    share = (total - done) / total if total else 0.0  # the job's tokens still to train
    if not steady:
        return {"known": False}
    rate = _median(steady)
    seconds = [fixed + tokens * share / max(steady), fixed + tokens * share / rate]
    seconds.append(max(seconds[1], fixed + slow * (total - done)))
    hours = [s / 3600 for s in seconds]
    cost = [h * gpus * price for h in hours] if price is not None else None
    return {
        "known": True, "tokens_per_s": rate, "tokens_total": tokens, "total_steps": total,
        "hours": hours[1], "hours_band": [hours[0], hours[2]], "gpu_hours": hours[1] * gpus,
        "price_per_gpu_hour": price, "cost": cost[1] if cost else None,
        "cost_band": [cost[0], cost[2]] if cost else None,
    }  # fmt: skip


def _capacity(ranks: list[dict[str, Any]]) -> float | None:
    values = [v for r in ranks if (v := num((r.get("memory") or {}).get("capacity_bytes")))]
    return min(values) if values else None


def gate(block: dict[str, Any], limits: Mapping[str, Any], ranks: list[dict[str, Any]]
         ) -> list[str]:  # fmt: skip
    """The gate's failures, each one line naming the limit and the knob that fixes it."""
    failed = []
    ext = block["extrapolated"]
    max_cost, max_hours = num(limits.get("max_cost")), num(limits.get("max_hours"))
    if max_cost is not None:
        if not ext.get("known") or ext.get("cost") is None:
            failed.append(f"--max-cost {max_cost:g}: no cost to judge (no steady step or no "
                          "price; set price_per_gpu_hour)")  # fmt: skip
        elif ext["cost"] > max_cost:
            lo, hi = ext["cost_band"]
            band = f"band {money(lo)}-{money(hi)}"
            failed.append(f"--max-cost {max_cost:g}: extrapolated {money(ext['cost'])} ({band}); "
                          f"{COST_KNOB}; or raise --max-cost")  # fmt: skip
    if max_hours is not None and ext.get("known") and ext["hours"] > max_hours:
        lo, hi = ext["hours_band"]
        failed.append(f"--max-hours {max_hours:g}: extrapolated {ext['hours']:.3g} h (band "
                      f"{lo:.3g}-{hi:.3g} h); {TIME_KNOB}, or raise --max-hours")  # fmt: skip
    headroom = num(limits.get("headroom"))
    headroom = DEFAULT_HEADROOM if headroom is None else headroom
    capacity, peak = _capacity(ranks), rank_max(ranks, "device_peak_bytes")
    if capacity and peak is not None and peak > (1 - headroom) * capacity:
        terms = {t["term"].replace("loss", "logits"): t["measured"] or 0 for t in block["terms"]}
        largest = max([k for k in KNOB_FOR_PART if k != "overhead"], key=lambda k: terms.get(k, 0))
        failed.append(f"--headroom {headroom:g}: peak {peak / 1e9:.3g} GB of "
                      f"{capacity / 1e9:.3g} GB per rank leaves under {headroom:.0%}; largest "
                      f"{largest}: {KNOB_FOR_PART[largest]}, or lower --headroom")  # fmt: skip
    retries = rank_max(ranks, "alloc_retries")
    if retries:
        failed.append(f"allocator retried {retries:.0f} times (fragmented at the limit); lower "
                      "micro_batch_size or activation_checkpointing=full")  # fmt: skip
    bad = [r for r in ranks if not r.get("resume_ok")]
    if bad:
        why = bad[0].get("resume_error") or "the loaded values differ from the saved ones"
        failed.append(f"resume check: rank {bad[0].get('rank')}: {why}; the job could not "
                      "resume from its checkpoints")  # fmt: skip
    return failed


def price_of(spec: Mapping[str, Any], predicted: Mapping[str, Any]) -> float | None:
    """The price per GPU-hour: the plan's, else the one the job set (a plan made where the
    job's cost could not be estimated keeps none)."""
    price = num(predicted.get("price_per_gpu_hour"))
    if price is None:
        price = num((spec.get("hyperparameters") or {}).get("price_per_gpu_hour"))
    return price


def judge(ranks: list[dict[str, Any]], spec: Mapping[str, Any], predicted: Mapping[str, Any]
          ) -> dict[str, Any]:  # fmt: skip
    """job.json's `canary` from the ranks' files (rank order), the spec and the plan."""
    limits = dict(spec.get("canary") or {})
    first = ranks[0]
    gpus = int(spec.get("gpu_count") or len(ranks))
    block: dict[str, Any] = {
        "steps": first.get("steps"), "ranks": len(ranks), "device": first.get("device"),
        "device_name": first.get("device_name"), "planned_gpu": predicted.get("gpu"),
        "gpu_count": gpus, "limits": limits, "terms": memory_terms(ranks, predicted),
        "optimizer": optimizer_time(ranks, predicted),
        "time": {k: first.get(k) for k in ("split_s", "step_s", "rates", "warmup_steps",
                                            "save_s", "load_s", "setup_s", "tokens")},
        "planned": {k: predicted.get(k) for k in ("tokens_per_s", "step_time_s", "gpu_hours",
                                                   "price")},
        "extrapolated": extrapolate(first, price_of(spec, predicted), gpus),
    }  # fmt: skip
    failed = gate(block, limits, ranks)
    block.update(decision=NO_GO if failed else GO, failed=failed, decided_at=now_iso())
    block["line"] = f"canary: no-go: {failed[0]}" if failed else "canary: go"
    return block


def read_ranks(job_dir: Path, ranks: list[int]) -> list[dict[str, Any]] | None:
    """Every rank's canary file, or None while one is missing or still being written."""
    out = []
    for rank in ranks:
        try:
            data = json.loads(rank_file(job_dir, rank).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        out.append(data)
    return out


def write_decision(job_dir: Path, block: Mapping[str, Any]) -> None:
    """The ranks' answer (the job record's block is written beside it by the supervisor)."""
    answer = {"go": block["decision"] == GO, "line": block["line"]}
    write_json_atomic(decision_file(job_dir), answer)


__all__ = ["canary_lines", "judge", "read_ranks", "write_decision", "read_decision"]


class CanaryWatch:
    """The supervisor's side: judge once every rank of this node wrote its file (`poll`,
    from its wait loop), then record, log and answer. Never raises: a gate that cannot
    judge answers no-go with the reason, so no rank waits for an answer that never comes."""

    def __init__(self, job_path: Path, spec: Mapping[str, Any], ranks: list[int]) -> None:
        self.job_path, self.job_dir = Path(job_path), Path(job_path).parent
        self.spec, self.ranks = spec, ranks
        self.enabled = bool(spec.get("canary"))
        self.block: dict[str, Any] | None = None

    def poll(self) -> None:
        """Judge when every rank's file is there (a few stats until then)."""
        if not self.enabled or self.block is not None:
            return
        found = read_ranks(self.job_dir, self.ranks)
        if found is None:
            return
        from veri_tui.jobfolder.contract.atomic import modify_job
        from veri_tui.jobfolder.contract.layout import LOG
        from veri_tui.jobfolder.contract.record import read_job
        from veri_tui.jobfolder.failures.failures import append_lines

        try:
            block = judge(found, self.spec, read_job(self.job_path).get("predicted") or {})
            lines = canary_lines(block)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, OSError) as exc:
            line = f"canary: no-go: the gate could not judge the measurements ({exc!r})"
            block = {"decision": NO_GO, "failed": [line], "line": line, "decided_at": now_iso()}
            lines = [line]
        self.block = block
        try:
            modify_job(self.job_path, lambda rec: rec.__setitem__("canary", block))
            append_lines(self.job_dir / LOG, lines)
        finally:
            write_decision(self.job_dir, block)  # last: the record says why before any rank goes on

    def stopped(self) -> bool:
        """True when the ranks stopped at the gate (this node's no-go, or another's): they
        ended without an artifact."""
        if not self.enabled:
            return False
        try:
            outcome = json.loads(outcome_file(self.job_dir).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return self.block is not None and self.block.get("decision") == NO_GO
        return isinstance(outcome, dict) and outcome.get("go") is False
