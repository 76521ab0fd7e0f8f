"""Calibration: the plan's throughput and activations corrected by what earlier runs measured.

Completed runs are folded in by the launch side (veri_tui/launch/calibrate.py) into
`$VERI_HOME/calibration.json`, one entry per (GPU type, host): an efficiency factor
(measured tokens/s over the model's) and an activation factor (measured peak minus measured
states, over the model's activations), each with the runs it came from; canaries
(`launch --canary`) add their runs too, with every term they measured, the overhead
(device peak less allocated peak), whose median replaces the plan's 2 GiB, and an optimizer
factor (the slowest rank's clipping and update over the plan's optimizer term,
veri_tui/plan/optimizer_time.py), which scales that term before the efficiency applies.
This module reads that file, holds the update rule, and applies an entry to a plan's
estimates.

The update rule keeps one odd run from swinging a factor far: every run's ratio is clipped
to [RATIO_MIN, RATIO_MAX]; the new estimate is the median of the last WINDOW clipped ratios
together with the uncalibrated 1.0 (counted once, so a first run moves the estimate halfway
and two agreeing runs settle it), and it is held between the old estimate and the new run's
ratio: an update moves toward the measurement, never past it.

Pure (stdlib only) and cheap: `veri-tui plan` pays one stat when there is no file. A file
that cannot be read or parsed is ignored; the plan says so in one warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from veri_tui.jobfolder.contract.layout import veri_home
from veri_tui.plan.activations import ActivationModel
from veri_tui.plan.model_info import ModelInfo

CALIBRATION_FILE = "calibration.json"
RATIO_MIN, RATIO_MAX = 0.5, 2.0
WINDOW = 15
PRIOR = 1.0  # the uncalibrated model, counted as one run
FACTORS = ("efficiency", "activation", "optimizer")


def calibration_path() -> Path:
    """$VERI_HOME/calibration.json ($VERI_HOME defaults to ~/.veri)."""
    return veri_home() / CALIBRATION_FILE


def entry_key(gpu: str, host: str | None) -> str:
    """The entry of a GPU type on a host (`local` for this machine)."""
    return f"{gpu}@{host or 'local'}"


def clip_ratio(ratio: float) -> float:
    """One run's ratio, bounded to [RATIO_MIN, RATIO_MAX]."""
    return min(max(ratio, RATIO_MIN), RATIO_MAX)


def median(values: list[float]) -> float:
    """The median (mean of the middle two for an even count); here rather than `statistics`,
    which would cost `veri-tui plan` its import (fractions, decimal, random)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def updated_factor(old: float | None, ratios: list[float]) -> float:
    """The estimate after the run whose clipped ratio is ``ratios[-1]`` (``ratios``: every
    run's clipped ratio, oldest first): the windowed median with the prior, held between
    the old estimate (1.0 when uncalibrated) and the new ratio."""
    before = PRIOR if old is None else old
    new = ratios[-1]
    middle = median([PRIOR, *ratios[-WINDOW:]])
    low, high = min(before, new), max(before, new)
    return min(max(middle, low), high)


def read_calibration(path: Path | None = None) -> tuple[dict[str, Any], str | None]:
    """(the file's data, None) or ({}, why it was ignored); a missing file is ({}, None)."""
    path = path or calibration_path()
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"cannot read: {exc.strerror or exc}"
    import json  # only when a file exists: a plain `veri-tui plan` does not import json

    try:
        data = json.loads(blob)
    except ValueError as exc:
        return {}, f"not JSON ({exc})"
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(e, dict) for e in entries.values()):
        return {}, "no 'entries' object of GPU@host entries"
    return data, None


def ignored_warning(path: Path, why: str) -> str:
    """The one warning for a calibration file that is not used (without `warning: `)."""
    return f"calibration: {path}: {why}; ignored (veri-tui calibrate --reset)"


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and RATIO_MIN <= value <= RATIO_MAX else None


def calibrated_note(estimate: dict[str, Any]) -> str:
    """` (calibrated from 3 runs on H100-80GB)` for an estimate a calibration changed (its
    `calibration` key), else "": what the plan's throughput and activation lines end with."""
    meta = estimate.get("calibration")
    if not meta:
        return ""
    runs, host = meta["runs"], meta["host"]
    where = "" if host == "local" else f" at {host}"
    return f" (calibrated from {runs} run{'s' if runs != 1 else ''} on {meta['gpu']}{where})"


class Calibration(NamedTuple):
    """One (GPU, host) entry's factors and how many runs each came from; identity if none."""

    gpu: str
    host: str
    efficiency: float | None = None
    efficiency_runs: int = 0
    activation: float | None = None
    activation_runs: int = 0
    optimizer: float | None = None
    optimizer_runs: int = 0
    overhead_bytes: int | None = None  # measured by canaries: device peak less allocated
    overhead_runs: int = 0

    def _meta(self, factor: str) -> dict[str, Any]:
        runs = getattr(self, f"{factor.removesuffix('_bytes')}_runs")
        return {factor: getattr(self, factor), "runs": runs, "gpu": self.gpu, "host": self.host}

    def throughput(self, tp: dict[str, Any]) -> dict[str, Any]:
        """A throughput estimate with its optimizer term scaled by the optimizer factor, then
        its step time divided by the efficiency factor (measured against the model's tokens/s
        as the plan gave it: with its optimizer factor)."""
        if not tp.get("known") or (self.efficiency is None and self.optimizer is None):
            return tp
        out = dict(tp)
        meta: dict[str, Any] = {"model_tokens_per_s": tp["tokens_per_s"],
                                "model_optimizer_s": tp["optimizer_s"]}  # fmt: skip
        if self.optimizer is not None:
            opt_s = tp["optimizer_s"] * self.optimizer
            out["step_time_s"] = tp["step_time_s"] - tp["optimizer_s"] + opt_s
            scale = tp["step_time_s"] / out["step_time_s"]
            out.update(optimizer_s=opt_s, tokens_per_s=tp["tokens_per_s"] * scale,
                       mfu=tp["mfu"] * scale)  # fmt: skip
            meta["optimizer"] = {"factor": self.optimizer, "runs": self.optimizer_runs}
            meta["model_tokens_per_s"] = out["tokens_per_s"]  # what efficiency is measured on
        f = self.efficiency
        if f is not None:
            keys = ("compute_s", "communication_s", "exposed_communication_s", "optimizer_s",
                    "step_time_s")  # fmt: skip
            for key in keys:
                out[key] = out[key] / f
            out["tokens_per_s"] = out["tokens_per_s"] * f
            out["mfu"] = out["mfu"] * f
        base = self._meta("efficiency") if f is not None else self._meta("optimizer")
        out["calibration"] = {**base, **meta}
        return out

    def activations(self, act: dict[str, Any], info: ModelInfo) -> dict[str, Any]:
        """An activation estimate scaled by the activation factor (fits, largest mbs too)."""
        f = self.activation
        if f is None or not act.get("known"):
            return act
        out = dict(act)
        keys = (
            "bytes_per_gpu",
            "with_checkpointing_bytes",
            "selective_bytes",
            "logits_at_peak_bytes",
        )
        for key in (*keys, "without_checkpointing_bytes"):
            out[key] = int(round(act[key] * f))
        out["fits"] = out["bytes_per_gpu"] <= act["available_bytes"]
        available = act["available_bytes"] / f  # f x activations(mbs) <= available
        model = ActivationModel.of(
            info, act["activation_checkpointing"], lora_rank=act["lora_rank"],
            autocast=act["autocast"], mask_length=act.get("mask_length", 0),
        )  # fmt: skip
        out["max_micro_batch_size"] = model.largest_micro_batch(act["sequence_length"], available)
        out["calibration"] = {**self._meta("activation"), "model_bytes": act["bytes_per_gpu"]}
        return out

    def peak(self, peak: dict[str, Any]) -> dict[str, Any]:
        """The step's peak by part (peak.py) with the overhead the canaries measured."""
        if self.overhead_bytes is None:
            return peak
        out = {**peak, "parts": {**peak["parts"], "overhead": self.overhead_bytes}}
        out["peak_bytes"] = peak["allocated_bytes"] + self.overhead_bytes
        out["fits"] = out["peak_bytes"] <= peak["memory_bytes"]
        out["calibration"] = self._meta("overhead_bytes")
        return out


def _overhead(entry: dict[str, Any], runs: list[dict[str, Any]]) -> tuple[int | None, int]:
    value = entry.get("overhead_bytes")
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    counted = sum(1 for r in runs if isinstance(r.get("overhead_bytes"), int))
    return (value if ok else None), counted


def calibration_for(gpu: str, host: str | None = None) -> tuple[Calibration, list[str]]:
    """The calibration of ``gpu`` on ``host`` (None: this machine), and the warnings of a
    file that was ignored."""
    identity = Calibration(gpu, host or "local")
    path = calibration_path()
    data, why = read_calibration(path)
    if why is not None:
        return identity, [ignored_warning(path, why)]
    entry = (data.get("entries") or {}).get(entry_key(gpu, host))
    if not entry:
        return identity, []
    runs = [r for r in entry.get("runs") or [] if isinstance(r, dict)]
    counts = {f: sum(1 for r in runs if _number(r.get(f"{f}_ratio")) is not None) for f in FACTORS}
    overhead, overhead_runs = _overhead(entry, runs)
    return identity._replace(
        overhead_bytes=overhead,
        overhead_runs=overhead_runs,
        efficiency=_number(entry.get("efficiency")),
        efficiency_runs=counts["efficiency"],
        optimizer=_number(entry.get("optimizer")),
        optimizer_runs=counts["optimizer"],
        activation=_number(entry.get("activation")),
        activation_runs=counts["activation"],
    ), []
