"""The GPU check's run half: the prepared jobs on the device found, inside one time budget.

In order: nvidia-smi into the log; the device asked for its name (a child process: this one
never touches CUDA) and the prepared plan of that GPU chosen (gpu_check_device.py);
random-weight models built from the configs (a child process each); the attention kernels
the GPU picks for them probed (gpu_check_kernels.py); the datasets written, the carried
wheels unpacked; then every job of that plan through the project's own
supervisor (gpu_check_jobs.py). Each run's timeout comes out of what is left of the budget,
keeping a floor for the runs after it (`run_timeout`). After every run $OUT is rewritten
(gpu_check_out.py: gpu_check.json, gpu_check.md, the log and one archive of every run's
logs and records); at the end the verdict (gpu_check_report.judge) gives the exit code.

`Device` is how runs reach the device: a GPU here; gpu_check_rehearse.py runs the same steps
on fake CUDA. Stdlib only apart from the trainer it starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_check_device import choose, detect
from gpu_check_files import bring_back, build_datasets, unpack_wheels
from gpu_check_jobs import REPO, SITE_ENV, missing, run_feature
from gpu_check_kernels import kernel_of, probe, specs
from gpu_check_out import RESULTS, TABLE, Log, pack, problems, write_atomic
from gpu_check_report import judge, render, summarize

STOP_RESERVE_S = 20.0  # cancelling a run: the supervisor's 5 s grace, a SIGKILL, a /proc scan
KERNELS_CAP_S = 90.0  # the attention-kernel probe: a model load and one step per shape
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SCRIPT = Path(__file__).resolve().parent / "gpu_check.py"


def run_timeout(remaining_s: float, runs_left: int, floor_s: float, cap_s: float) -> float | None:
    """Seconds the next run may take: what is left of the budget, less `floor_s` kept for
    each run after it, at most `cap_s`; None (skip it) when that is under `floor_s`."""
    t = min(cap_s, remaining_s - floor_s * max(runs_left - 1, 0))
    return t if t >= floor_s else None


def fill_paths(record: dict[str, Any], work: Path) -> dict[str, Any]:
    """The prepared job.json with this machine's work folder in place of @WORK@."""
    spec = dict(record["spec"])
    for key in ("model_path", "dataset", "output_dir"):
        spec[key] = spec[key].replace("@WORK@", str(work))
    for key in ("datasets", "eval_datasets"):  # each source's own path (issue 27's sources)
        if spec.get(key):
            spec[key] = [{**s, "path": s["path"].replace("@WORK@", str(work))} for s in spec[key]]
    return {**record, "spec": spec}


class Device:
    """A GPU: nvidia-smi, CUDA's name for it, random weights built on it, the supervisor."""

    label = "GPU"

    def smi(self) -> str:
        """nvidia-smi's table, or why there is none."""
        try:
            out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"nvidia-smi: {type(exc).__name__}: {exc}"
        return (out.stdout + out.stderr).rstrip()

    def detect(self, device: str) -> dict[str, Any]:
        return detect(device)

    def build(self, folder: Path, device: str, timeout: float) -> subprocess.CompletedProcess:
        """Random bf16 weights for folder/config.json, in a child (`--build-model`)."""
        cmd = [sys.executable, str(SCRIPT), str(folder), "--build-model", "--build-device",
               device]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)

    def kernels(self, specs: list[dict[str, Any]], timeout: float, device: str) -> dict:
        """The attention kernels the device picks for each model (gpu_check_kernels.py)."""
        return probe(specs, timeout, device)

    def missing(self, expected: dict[str, Any]) -> str | None:
        """Why this run cannot be judged here ("not judged: ..."), or None."""
        return missing(expected)

    def run(self, job: Path, expected: dict[str, Any], timeout: float) -> dict[str, Any]:
        return run_feature(job, expected, timeout)


def build_models(
    prep: Path, work: Path, plan: dict, deadline: float, dev: Device, log: Log
) -> dict:
    """Each shape's model folder (config from DIR, bundled tokenizer, weights); returns
    {"failed": {shape: why}}."""
    device = "cuda" if plan["device"] in ("cuda", "auto") else "cpu"
    failed: dict[str, str] = {}
    for shape in plan["shapes"]:
        folder = work / "models" / shape
        config = (prep / "models" / shape / "config.json").read_text()
        if (folder / "model.safetensors").exists() and (folder / "config.json").exists():
            continue  # a --work folder kept from an earlier run: the same random model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(config)
        for name in TOKENIZER_FILES:
            shutil.copy(REPO / "assets" / "tiny-model" / name, folder / name)
        left = max(deadline - time.monotonic() - STOP_RESERVE_S, 1.0)
        t0 = time.monotonic()
        try:
            proc = dev.build(folder, device, left)
        except subprocess.TimeoutExpired:
            failed[shape] = f"model build over the budget ({left:.0f} s)"
            continue
        if proc.returncode != 0:
            failed[shape] = "model build failed: " + proc.stderr.strip()[-500:]
            continue
        log.say(f"model {shape}: built in {time.monotonic() - t0:.0f} s")
    return {"failed": failed}


def write_results(out: Path | None, head: dict[str, Any], plan: dict, rows: list[dict]) -> str:
    """Rewrite gpu_check.json and gpu_check.md (atomically); returns the table."""
    table = render(plan, rows, head["device"])
    if out is not None:
        record = {**head, "runs": rows}
        write_atomic(out / RESULTS, (json.dumps(record, indent=1) + "\n").encode())
        write_atomic(out / TABLE, (table + "\n").encode())
    return table


def run_all(
    prep: Path, out: Path | None, work: Path, budget_s: float, floor_s: float, cap_s: float,
    dev: Device | None = None,
) -> int:  # fmt: skip
    """Run the prepared check on the device found (module docstring); the exit code."""
    dev = dev or Device()
    deadline = time.monotonic() + budget_s
    log = Log(out)
    log.say(dev.smi())
    prepared = json.loads((prep / "plan.json").read_text())
    found = dev.detect(prepared["device"])
    gpu, why = choose(found, prepared["gpus"])
    plan = prepared["plans"][gpu]
    device = found.get("name") or "no CUDA device answered"
    if found.get("torch"):
        device += f", torch {found['torch']}"
    log.say(f"device: {device}; {why}")
    head = {"device": device, "planned_for": gpu, "plan_choice": why, "on": dev.label,
            "prepared_for": prepared["gpus"], "wheels": prepared.get("wheels") or [],
            "wheel_note": prepared.get("wheel_note", ""), "verdict": None}  # fmt: skip
    if found.get("name") is None:  # no device: nothing can run; say so at once, spend nothing
        built = {"failed": {s: f"not run: no CUDA device answered ({found.get('error')})"
                            for s in plan["shapes"]}}  # fmt: skip
    else:
        built = build_models(prep, work, plan, deadline, dev, log)
    if found.get("name") is not None:  # (the CPU mode probes its CPU: the same code)
        shapes = [x for x in specs(plan, work) if x["shape"] not in built["failed"]]
        left = deadline - time.monotonic() - STOP_RESERVE_S - floor_s * len(plan["runs"])
        kind = "cpu" if plan["device"] == "cpu" else "cuda"
        head["kernels"] = dev.kernels(shapes, max(min(KERNELS_CAP_S, left), 10.0), kind)
        log.say("attention kernels: " + "; ".join(
            f"{k}: {kernel_of(v) if isinstance(v, dict) else v}"
            for k, v in head["kernels"].items()))  # fmt: skip
    build_datasets(work, plan["runs"])
    site = unpack_wheels(prep, work)
    if site is not None:  # the jobs import the carried wheels (bitsandbytes) from here
        SITE_ENV["PYTHONPATH"] = f"{REPO}{os.pathsep}{site}"
    staging, rows = work / "back", []
    for i, expected in enumerate(plan["runs"]):
        name = expected["name"]
        remaining = deadline - time.monotonic() - STOP_RESERVE_S
        timeout = run_timeout(remaining, len(plan["runs"]) - i, floor_s, cap_s)
        why_not = dev.missing(expected)
        if expected["shape"] in built["failed"]:
            rows.append(summarize(expected, {"status": built["failed"][expected["shape"]]}))
        elif why_not:
            rows.append(summarize(expected, {"status": why_not}))
        elif timeout is None:
            rows.append(summarize(expected, None))
        else:
            job = work / "jobs" / name / "job.json"
            job.parent.mkdir(parents=True, exist_ok=True)
            prepared_job = prep / "runs" / gpu / name / "job.json"
            job.write_text(json.dumps(fill_paths(json.loads(prepared_job.read_text()), work)))
            raw = dev.run(job, expected, timeout)
            raw["files"] = bring_back(job.parent, staging, name)  # logs, failure records
            rows.append(summarize(expected, raw))
            shutil.rmtree(job.parent / "output", ignore_errors=True)  # the artifact: GBs
        log.say(json.dumps(rows[-1]))
        write_results(out, head, plan, rows)
        if out is not None:
            pack(staging, out)
    head["verdict"] = verdict = judge(rows)
    log.say(write_results(out, head, plan, rows))
    log.say(verdict["line"])
    wrong = problems(out) if out is not None else []
    for line in wrong:
        log.say(f"error: $OUT would not come back whole: {line}")
    return 1 if wrong else int(verdict["exit_code"])
