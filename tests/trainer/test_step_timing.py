"""The per-step tokens/s of metrics.jsonl times the optimizer step alone (issue 34).

On CUDA every step is followed by an NVML sample (veri_tui/trainer/devmem.py: an init, a query
and a shutdown, at most once a second), the measurement file and the evaluation. They must
not land in the step's clock, or the rate gpu_check and the canary read from metrics.jsonl is
low by their cost. Here the sample is made slow for real (0.3 s, in the one method the
trainer calls for it) in a one-rank CPU run of the real trainer, and the rate of each metric
line must still match the step's own time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from trainer_jobs import REPO, metrics, write_job

from veri_tui.trainer.runstats import WARMUP_STEPS

SLOW_SAMPLE_S = 0.3
RUN = f"""
import sys, time
from veri_tui.trainer import devmem
def slow_sample(self, force=False):  # NVML's init, query and shutdown, made slow
    time.sleep({SLOW_SAMPLE_S!r})
devmem.DeviceMemory.sample = slow_sample
from veri_tui.trainer.__main__ import main
sys.exit(main(["--job", sys.argv[1]]))
"""


def test_nvml_sampling_stays_out_of_the_steps_tokens_per_s(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", gpu_count=1, max_steps=4, micro_batch_size=1,
                    logging_steps=1, max_seq_length=32)  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "0", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "LOCAL_WORLD_SIZE": "1"}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", RUN, str(job)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = metrics(job.parent)
    assert len(lines) == 4
    measured = json.loads((job.parent / "measured" / "run-rank-0.json").read_text())
    # The measured steady rate (runstats.py: the median after the warm-up steps) is taken
    # before the sample. The metric lines time the same steps with the same clock: their
    # median rate is the measured one (to the line's rounding). Before the fix each line also
    # paid the 0.3 s sample (and the file write): tokens / (step + 0.3 s), a fraction of it.
    rates = [m["tokens_per_s"] for m in lines][WARMUP_STEPS:]
    assert statistics.median(rates) == pytest.approx(measured["tokens_per_s"], abs=0.1)
