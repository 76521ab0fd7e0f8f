"""`bash benchmarks/gpu_check.sh --rehearse`: every run of the GPU check through the same code,
here, on fake CUDA (benchmarks/gpu_check_rehearse.py), with the same $OUT, exiting 0.

A trial (minutes: each job's real shapes traced in a process of its own; docs/trials.md).
The suite keeps the pieces: $OUT's layout rules and the verdict (test_gpu_check_out.py), the
fake-CUDA harness itself (tests/trainer), the CPU mode end to end (test_gpu_check_cpu.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import gpu_check
import pytest

REPO = Path(gpu_check.__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.trial
def test_the_rehearsal_runs_every_run_on_fake_cuda_and_exits_zero(tmp_path: Path) -> None:
    prep, out = tmp_path / "prep", tmp_path / "out"
    assert gpu_check.main([str(prep), "--prepare", "--no-fetch"]) == 0
    proc = subprocess.run(["bash", "benchmarks/gpu_check.sh", str(prep), "--rehearse"],
                          cwd=REPO, env={**os.environ, "OUT": str(out)}, capture_output=True,
                          text=True, timeout=700)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
        "gpu_check_runs.tar.gz",
    ]
    result = json.loads((out / "gpu_check.json").read_text())
    assert (result["device"].split(",")[0], result["planned_for"]) == (
        "NVIDIA H100 80GB HBM3",
        "H100-80GB",
    )  # chosen by the name, as on a GPU
    plan = json.loads((prep / "plan.json").read_text())["plans"]["H100-80GB"]
    assert [r["name"] for r in result["runs"]] == [r["name"] for r in plan["runs"]]
    assert result["verdict"]["not_judged"] == ["qlora"] and result["verdict"]["failed"] == []
    with tarfile.open(out / "gpu_check_runs.tar.gz") as tar:
        names = set(tar.getnames())
    for row in result["runs"]:
        if row["name"] == "qlora":
            continue
        # The trainer's own step traced at the run's shapes, its peak against the plan's.
        assert row["measured_peak_bytes"] > 0 and row["peak_ratio"] > 0, row
        assert f"runs/{row['name']}/measured/trace.json" in names
