"""The host-memory preflight (veri_tui/launch/memcheck.py) against this machine's real memory.

A 70B-shaped header-only checkpoint (tests/support/synthetic.py, nothing downloaded) with
cpu_offload keeps its sharded states in host memory: the plan's `host_bytes_per_node` is
hundreds of GB, far above this machine's MemAvailable, so `veri-tui launch` must refuse it
before anything starts. No reading is mocked: the limit is the machine's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launch_helpers import cli
from support.synthetic import LLAMA_3_1_70B, add_tokenizer, write_checkpoint

from veri_tui.launch import jobs
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.memcheck import local_available, mem_available
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.memory import gb

SAMPLE = str(BUNDLED_DATASETS["sft_text"])  # a model of your own needs a dataset (issue 35)

pytestmark = pytest.mark.timeout(180)
OFFLOAD = ["--set", "cpu_offload=true"]


@pytest.fixture
def big_model(tmp_path: Path) -> Path:
    """A header-only Llama-3.1-70B-shaped checkpoint (a few MB on disk)."""
    folder = tmp_path / "llama-70b"
    write_checkpoint(folder, LLAMA_3_1_70B)
    return add_tokenizer(folder)  # a launch refuses a model without one


def test_meminfo_is_read_from_this_machine() -> None:
    text = Path("/proc/meminfo").read_text()
    total = mem_available(text.replace("MemAvailable:", "MemTotal-not:"))
    assert total is None  # only the MemAvailable line counts
    avail = local_available()
    assert avail is not None and 0 < avail
    assert local_available(Path("/nonexistent/meminfo")) is None


def test_a_job_above_this_machines_memory_is_refused_before_anything_starts(
    home: Path, big_model: Path
) -> None:
    args = ["--model", str(big_model), "--dataset", SAMPLE, "--gpu-count", "2", *OFFLOAD]
    planned = cli("plan", *args, "--json")
    assert planned.returncode == 0, planned.stderr
    need = json.loads(planned.stdout)["host_bytes_per_node"]
    avail = local_available()
    assert avail is not None and need > 10 * avail  # a real limit, far away
    out = cli("launch", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(
        f"error: host_memory: {gb(need)} per node needed (2 ranks x {gb(-(-need // 2))}), "
    )
    assert (
        "available on this machine; use fewer ranks per node, LoRA (lora_rank), or no "
        in (lines[0])
    )
    assert not (home / "jobs").exists()  # no job folder, nothing started
    text = cli("plan", *args)
    assert f"host memory: {gb(need)} per node (2 ranks x" in text.stdout


def test_preflight_rows_show_host_memory(home: Path, big_model: Path) -> None:
    job = load_job_config(None, model=str(big_model), dataset=SAMPLE, gpu_count=2,
                          sets=["cpu_offload=true"])  # fmt: skip
    refused = jobs.preflight(job)
    bad = [r for r in refused if r[0] == "host_memory"]
    assert len(bad) == 1 and bad[0][1] is False
    assert "available on this machine; use fewer ranks per node" in bad[0][2]

    small = load_job_config(None, gpu_count=2, sets=["cpu_offload=true"])
    rec = plan_job(small)
    assert 0 < rec.host_bytes_per_node < local_available()  # the tiny default model fits
    rows = {r[0]: r for r in jobs.preflight(small, rec)}
    ok = rows["host_memory"]
    assert ok[1] is True and ok[2].startswith(f"{gb(rec.host_bytes_per_node)} per node (2 ranks")
    assert ok[2].endswith("available on this machine")

    plain = {r[0]: r for r in jobs.preflight(load_job_config(None, gpu_count=2))}
    assert plain["host_memory"][1] is True
    assert plain["host_memory"][2].startswith("no offloaded states; ")
