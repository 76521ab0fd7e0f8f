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
  job's ranks (veri_tui/trainer/fakecuda/trace.py: the model loaded as planned, two
  optimizer steps, the evaluation when the job has one, a checkpoint's save and resume),
  writing log.txt and measured/trace.json into the job folder. The traced allocated peak is
  the row's allocated figure, set against the same plan.

What fake CUDA cannot do, each row says (`rehearsed`): no speed (no kernel runs), no
reserved or device memory (no allocator, no driver), no injected failure and supervisor
resume (no torchrun); QLoRA needs bitsandbytes' CUDA kernels and is not judged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

from gpu_check_device import ASK
from gpu_check_run import Device

#: The GPUs a rehearsal can play: CUDA's name and memory for each (KINDS.md, as seen).
PLAYS = {"H100": ("NVIDIA H100 80GB HBM3", 81559 << 20),
         "H200": ("NVIDIA H200", 143771 << 20)}  # fmt: skip
NOT_REHEARSED = (
    "rehearsed on fake CUDA: the allocated peak traced; no speed, reserved or device "
    "memory, injected failure or resume"
)
HERE = Path(__file__).resolve()


def _child(args: list[str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
    """This file as a child process in a session of its own, killed whole past `timeout`."""
    cmd = [sys.executable, str(HERE), *args]
    out = open(log, "w") if log is not None else subprocess.PIPE  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


class FakeDevice(Device):
    """The GPU check's device, played on fake CUDA (module docstring)."""

    label = "fake CUDA (rehearsal)"

    def __init__(self, plays: str = "H100") -> None:
        self.name, self.memory = PLAYS[plays]

    def smi(self) -> str:
        return "nvidia-smi: not run (a rehearsal on fake CUDA: no driver here)"

    def detect(self, device: str) -> dict[str, Any]:
        try:
            proc = _child(["detect", self.name, str(self.memory)], timeout=300)
        except subprocess.TimeoutExpired:
            return {"name": None, "error": "the fake device did not answer in 300 s"}
        if proc.returncode != 0:
            return {"name": None, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    def build(self, folder: Path, device: str, timeout: float) -> subprocess.CompletedProcess:
        return _child(["headers", str(folder)], timeout)

    def missing(self, expected: dict[str, Any]) -> str | None:
        if expected.get("needs") == "bitsandbytes":
            return "not judged: QLoRA runs bitsandbytes' CUDA kernels, which fake CUDA has not"
        return None

    def run(self, job: Path, expected: dict[str, Any], timeout: float) -> dict[str, Any]:
        t0 = time.monotonic()
        status, error = "succeeded", None
        try:
            proc = _child(["trace", str(job), self.name], timeout, log=job.parent / "log.txt")
            if proc.returncode != 0:
                status, error = "failed", f"exit code {proc.returncode} (log.txt)"
        except subprocess.TimeoutExpired:
            status = "timeout"
        path = job.parent / "measured" / "trace.json"
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


def _gpu_properties(memory: int) -> Any:
    """What torch.cuda.get_device_properties answers for the GPU played."""
    return types.SimpleNamespace(total_memory=memory, major=9, minor=0)


def main(argv: list[str]) -> int:
    """Children: `detect NAME MEMORY`, `headers FOLDER`, `trace JOB NAME`."""
    repo = HERE.parents[1]
    sys.path[:0] = [str(repo), str(repo / "tests")]
    what, *rest = argv
    if what == "headers":  # the checkpoint's shapes, no bytes
        from support.synthetic import write_checkpoint

        folder = Path(rest[0])
        write_checkpoint(folder, json.loads((folder / "config.json").read_text()))
        return 0
    import torch
    from veri_tui.trainer.fakecuda.session import fake_rank

    if what == "detect":
        name, memory = rest[0], int(rest[1])
        with fake_rank(1, gpu_name=name):
            torch.cuda.get_device_properties = lambda device=None: _gpu_properties(memory)
            exec(ASK, {})  # the GPU's own question (gpu_check_device.ASK), asked of fake CUDA
        return 0
    from veri_tui.trainer.fakecuda.trace import trace

    from veri_tui.trainer.config import from_spec, load_spec

    job, name = Path(rest[0]), rest[1]
    cfg = from_spec(load_spec(job), job.parent)
    print(
        f"rehearsal: {job.parent.name} as rank 0 of {cfg.data_parallel_size} on fake CUDA ({name})"
    )
    summary = trace(cfg, cfg.data_parallel_size, gpu_name=name).summary()
    (job.parent / "measured").mkdir(exist_ok=True)
    (job.parent / "measured" / "trace.json").write_text(json.dumps(summary, indent=1))
    print(f"traced: peak {summary['peak_allocated_bytes'] / 1e9:.2f} GB allocated "
          f"({summary.get('peak_phase')}), {summary.get('seconds')} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
