"""Fold finished jobs into the calibration file ($VERI_HOME/calibration.json).

When the launch side reads a job that succeeded with `measured` and `predicted` (jobs.get_job,
list_jobs: `veri-tui jobs`, `launch --wait`, the app's monitor), its ratios go into the entry
of its (GPU type, host): measured tokens/s over the model's, and measured peak minus measured
states (minus the stage-3 layers in flight) over the model's activations (not for a
cpu_offload run, whose GPU holds no states: its activations cannot be told from the layers in
flight, so only its throughput folds). Each job is folded
once: its id is kept in `folded`, which `veri-tui calibrate --reset` keeps too, so a reset
does not fold old jobs back in. CPU runs go under the GPU type "cpu", which no GPU plan
reads. A job's decided canary (job.json `canary`, docs/canary.md) folds once more, as
`<id>:canary`: its steady tokens/s and activations, its slowest rank's optimizer time over
the plan's optimizer term, every term it measured beside the plan's, and the overhead, whose
median the next plan takes instead of its 2 GiB.
The update rule is veri_tui.plan.calibration's.

Writes go through veri_tui.jobfolder.contract.atomic's writer under a flock on
`calibration.json.lock` (the app and the CLI may fold at once). A file that cannot be parsed is left
alone (the plan warns; `veri-tui calibrate --reset` replaces it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from veri_tui.jobfolder.contract.atomic import job_lock, write_json_atomic
from veri_tui.jobfolder.contract.status import SUCCEEDED
from veri_tui.plan.calibration import (
    WINDOW,
    calibration_path,
    clip_ratio,
    entry_key,
    median,
    read_calibration,
    updated_factor,
)

VERSION = 1


def _pos(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def ratios_of(record: Mapping[str, Any]) -> dict[str, float]:
    """The run's raw (unclipped) efficiency and activation ratios, those it has figures for."""
    pred, meas = record.get("predicted") or {}, record.get("measured") or {}
    out = {}
    tps, model_tps = _pos(meas.get("tokens_per_s")), _pos(pred.get("tokens_per_s_model"))
    if tps and model_tps:
        out["efficiency"] = tps / model_tps
    peak, states = _pos(meas.get("peak_bytes")), _pos(meas.get("states_bytes"))
    model_act = _pos(pred.get("activations_model_bytes"))
    # An offloaded run's GPU holds the units in flight, not the states, and the plan counts
    # those as its states: peak - states would not be the activations. Only its rate folds.
    if peak and states and model_act and not meas.get("offloaded"):
        beyond = peak - states - (pred.get("transient_gather_bytes") or 0)
        if beyond > 0:
            out["activation"] = beyond / model_act
    return out


def foldable(record: Mapping[str, Any]) -> bool:
    """A run that completed and measured its steps (with a plan to compare against)."""
    meas = record.get("measured") or {}
    return (
        record.get("status") == SUCCEEDED
        and bool(record.get("predicted"))
        and bool(meas.get("final"))
        and bool(meas.get("steps_timed"))
    )


def canary_run(record: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """(GPU type, host, the run's calibration entry) of a decided canary (job.json
    `canary`): its efficiency and activation ratios, every term beside the plan's, and the
    overhead it measured; None when the job has no decided canary with measurements."""
    block = record.get("canary") or {}
    terms = {t.get("term"): t for t in block.get("terms") or [] if isinstance(t, dict)}
    if block.get("decision") is None or not terms:
        return None
    pred = record.get("predicted") or {}
    raw: dict[str, float] = {}
    tps, model_tps = _pos((block.get("extrapolated") or {}).get("tokens_per_s")), _pos(
        pred.get("tokens_per_s_model"))  # fmt: skip
    if tps and model_tps:
        raw["efficiency"] = tps / model_tps
    act, model_act = _pos(terms.get("activations", {}).get("measured")), _pos(
        pred.get("activations_model_bytes"))  # fmt: skip
    if act and model_act:
        raw["activation"] = act / model_act
    opt = block.get("optimizer") or {}  # the slowest rank's clip + update over the plan's
    opt_s, model_opt = _pos(opt.get("measured")), _pos(opt.get("planned"))
    if opt_s and model_opt:
        raw["optimizer"] = opt_s / model_opt
    run: dict[str, Any] = {"job_id": f"{record.get('job_id')}:canary", "source": "canary",
                           "ended_at": block.get("decided_at")}  # fmt: skip
    for factor, value in raw.items():
        run[f"{factor}_raw"] = round(value, 4)
        run[f"{factor}_ratio"] = round(clip_ratio(value), 4)
    run["terms"] = {k: {"planned": t.get("planned"), "measured": t.get("measured")}
                    for k, t in terms.items()}  # fmt: skip
    overhead = terms.get("overhead", {}).get("measured")
    if isinstance(overhead, int | float) and overhead >= 0:
        run["overhead_bytes"] = int(overhead)
    gpu = str(pred.get("gpu") or "?") if block.get("device") == "cuda" else "cpu"
    return gpu, record.get("host") or "local", run


def fold_canary(data: dict[str, Any], record: Mapping[str, Any]) -> bool:
    """Fold a job's decided canary (once, as `<id>:canary`); False when folded or none."""
    found = canary_run(record)
    folded = data.setdefault("folded", [])
    if found is None or found[2]["job_id"] in folded:
        return False
    gpu, host, run = found
    folded.append(run["job_id"])
    entry = data.setdefault("entries", {}).setdefault(
        entry_key(gpu, host), {"gpu": gpu, "host": host, "runs": []}
    )
    entry["runs"].append(run)
    for factor in ("efficiency", "activation", "optimizer"):
        history = [r[f"{factor}_ratio"] for r in entry["runs"] if f"{factor}_ratio" in r]
        if f"{factor}_ratio" in run:
            entry[factor] = round(updated_factor(entry.get(factor), history), 4)
    measured = [r["overhead_bytes"] for r in entry["runs"] if "overhead_bytes" in r]
    if measured:
        entry["overhead_bytes"] = int(median([float(v) for v in measured[-WINDOW:]]))
    return True


def fold_into(data: dict[str, Any], record: Mapping[str, Any]) -> bool:
    """Fold one job record into the calibration data (in place); False when it was folded
    before or is not a completed, measured run."""
    job_id = record.get("job_id")
    folded = data.setdefault("folded", [])
    if not job_id or job_id in folded or not foldable(record):
        return False
    folded.append(job_id)
    ratios = ratios_of(record)
    if not ratios:
        return True
    meas = record["measured"]
    gpu, host = str(meas.get("gpu") or "?"), record.get("host") or "local"
    entry = data.setdefault("entries", {}).setdefault(
        entry_key(gpu, host), {"gpu": gpu, "host": host, "runs": []}
    )
    run: dict[str, Any] = {"job_id": job_id, "ended_at": record.get("ended_at")}
    for factor, raw in ratios.items():
        run[f"{factor}_raw"] = round(raw, 4)
        run[f"{factor}_ratio"] = round(clip_ratio(raw), 4)
    entry["runs"].append(run)
    for factor in ratios:
        history = [r[f"{factor}_ratio"] for r in entry["runs"] if f"{factor}_ratio" in r]
        entry[factor] = round(updated_factor(entry.get(factor), history), 4)
    return True


def fold_jobs(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Fold every completed, measured job not folded yet; returns the ids folded now. A
    calibration file that cannot be parsed is left as it is (nothing is folded)."""
    ids = [i for r in records for i in _fold_ids(r)]
    if not ids:
        return []  # the common case costs no file access at all
    path = calibration_path()
    seen, why = read_calibration(path)  # without the lock: most reads find them folded
    if why is not None or all(i in (seen.get("folded") or ()) for i in ids):
        return []
    path.parent.mkdir(parents=True, exist_ok=True)
    with job_lock(path):
        data, why = read_calibration(path)
        if why is not None:
            return []
        data.setdefault("version", VERSION)
        done = [r["job_id"] for r in records if fold_into(data, r)]
        done += [f"{r['job_id']}:canary" for r in records if fold_canary(data, r)]
        if done:
            write_json_atomic(path, data)
    return done


def _fold_ids(record: Mapping[str, Any]) -> list[str]:
    """The ids a record would fold under: the job's (completed) and its canary's."""
    ids = [str(record.get("job_id"))] if foldable(record) else []
    return ids + ([f"{record.get('job_id')}:canary"] if canary_run(record) else [])


def reset() -> bool:
    """Empty the calibration, keeping the ids of folded jobs (they stay out); True if there
    was a file. A file that cannot be parsed is replaced."""
    path = calibration_path()
    if not path.exists():
        return False
    with job_lock(path):
        data, _why = read_calibration(path)
        kept = [j for j in data.get("folded") or [] if isinstance(j, str)]
        write_json_atomic(path, {"version": VERSION, "entries": {}, "folded": kept})
    return True
