"""The GPU check rehearsed here, on fake CUDA: every run of it through the same code, no GPU.

    OUT=dir bash benchmarks/gpu_check.sh --rehearse [--rehearse-gpu H200]

The same run half as on a GPU (gpu_check_run.run_all: the plan chosen by the device's name,
the time budget and each run's timeout, one child process per job, $OUT's four files
rewritten after every run, the verdict and exit code), with `FakeDevice` in place of the GPU:

- nvidia-smi: none (no driver here);
- the device: CUDA's name and memory asked by a child process, as on a GPU, that child on
  fake CUDA (veri_tui/trainer/fakecuda) playing an "NVIDIA H100 80GB HBM3" of 81,559 MiB
  (an "NVIDIA H200" of 143,771 MiB with `--rehearse-gpu H200`), so gpu_check_device.choose
  picks that GPU's plan;
- models: header-only safetensors of each config (a fake tensor has nowhere for bytes to
  land), where a GPU builds random weights;
- each job: a child process that reads the prepared job.json as the trainer does
  (`from_spec(load_spec(...))`) and runs the trainer's own code on fake CUDA as rank 0 of the
  job's ranks (`python -m veri_tui.trainer.fakecuda --job JOB`, the harness's own command:
  the model loaded as planned, two optimizer steps, the evaluation when the job has one, a
  checkpoint's save and resume when the job checkpoints), its figures into
  measured/trace.json and its log into log.txt in the job folder. The traced allocated peak
  is the row's allocated figure, set against the same plan.

What fake CUDA cannot do, each row says (`rehearsed`): no speed (no kernel runs), no
reserved or device memory (no allocator, no driver), no injected failure and supervisor
resume (no torchrun); QLoRA needs bitsandbytes' CUDA kernels and is not judged.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_check_device import ASK
from gpu_check_run import Device

#: The GPUs a rehearsal can play, by the names CUDA gives them (the harness knows their
#: memory: veri_tui/trainer/fakecuda/runtime.py MEMORY_OF).
PLAYS = {"H100": "NVIDIA H100 80GB HBM3", "H200": "NVIDIA H200"}
NOT_REHEARSED = (
    "rehearsed on fake CUDA: the allocated peak traced; no speed, reserved or device "
    "memory, injected failure or resume"
)
HERE = Path(__file__).resolve()
REPO = HERE.parents[1]


def _child(
    args: list[str], timeout: float, stdout: Path | None = None, log: Path | None = None
) -> subprocess.CompletedProcess:
    """`python ARGS` in a session of its own, killed whole past `timeout`; its output into
    `stdout` and `log` (files) when given, else returned."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(stdout, "w")) if stdout else subprocess.PIPE
        err = files.enter_context(open(log, "w")) if log else subprocess.PIPE
        proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=err, text=True,
                                cwd=REPO, env=env, start_new_session=True)  # fmt: skip
        try:
            got_out, got_err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(args, proc.returncode, got_out, got_err)


class FakeDevice(Device):
    """The GPU check's device, played on fake CUDA (module docstring)."""

    label = "fake CUDA (rehearsal)"

    def __init__(self, plays: str = "H100") -> None:
        self.name = PLAYS[plays]

    def smi(self) -> str:
        return "nvidia-smi: not run (a rehearsal on fake CUDA: no driver here)"

    def detect(self, device: str) -> dict[str, Any]:
        try:
            proc = _child([str(HERE), "detect", self.name], timeout=300)
        except subprocess.TimeoutExpired:
            return {"name": None, "error": "the fake device did not answer in 300 s"}
        if proc.returncode != 0:
            return {"name": None, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    def build(self, folder: Path, device: str, timeout: float) -> subprocess.CompletedProcess:
        return _child([str(HERE), "headers", str(folder)], timeout)

    def kernels(self, specs: list[dict[str, Any]], timeout: float, device: str) -> dict:
        why = "fake CUDA picks none: each trace pins flash (its row's trace.attention_kernels)"
        return {x["shape"]: {"error": why} for x in specs}

    def missing(self, expected: dict[str, Any]) -> str | None:
        if expected.get("needs") == "bitsandbytes":
            return "not judged: QLoRA runs bitsandbytes' CUDA kernels, which fake CUDA has not"
        return None

    def run(self, job: Path, expected: dict[str, Any], timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        status, error = "succeeded", None
        path = job.parent / "measured" / "trace.json"
        path.parent.mkdir(exist_ok=True)
        # The harness's own command line (what `veri-tui plan --trace` runs): the job.json
        # read as a rank reads it, its step traced as rank 0 of the job's ranks.
        cmd = ["-m", "veri_tui.trainer.fakecuda", "--job", str(job), "--gpu-name", self.name]
        hp = json.loads(job.read_text())["spec"].get("hyperparameters") or {}
        if not hp.get("checkpoint_steps"):  # the run saves no checkpoint: nor does its trace
            cmd.append("--no-save")
        try:
            proc = _child(cmd, timeout, stdout=path, log=job.parent / "log.txt")
            if proc.returncode != 0:
                status, error = "failed", f"exit code {proc.returncode} (log.txt)"
        except subprocess.TimeoutExpired:
            status = "timeout"
        traced = json.loads(path.read_text()) if status == "succeeded" else {}
        measured = {"device": "cuda", "peak_bytes": traced.get("peak_allocated_bytes"),
                    "device_memory_source": "not measured (fake CUDA: no driver)"}  # fmt: skip
        return {
            "status": status, "error": error, "timeout_s": round(timeout, 1),
            "wall_s": round(time.monotonic() - t0, 1), "left_running": [], "metrics": [],
            "job_measured": measured, "attempts": [], "rehearsed": NOT_REHEARSED,
            "trace": {k: traced.get(k) for k in ("peak_allocated_bytes", "peak_phase",
                      "peak_by_holder", "attention_kernels", "seconds")},
        }  # fmt: skip


def main(argv: list[str]) -> int:
    """Children: `detect NAME`, `headers FOLDER`."""
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    what, *rest = argv
    if what == "headers":  # the checkpoint's shapes, no bytes
        from support.synthetic import moe_tensors, write_checkpoint

        folder = Path(rest[0])
        config = json.loads((folder / "config.json").read_text())
        moe = moe_tensors(config) if config.get("num_experts") else None
        write_checkpoint(folder, config, tensors=moe)
        return 0

    from veri_tui.trainer.fakecuda.session import fake_rank

    if what == "detect":  # the GPU's own question (gpu_check_device.ASK), of fake CUDA
        with fake_rank(1, gpu_name=rest[0]):
            exec(ASK, {})
        return 0
    raise SystemExit(f"error: {what}: not a child of this module (detect, headers)")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
