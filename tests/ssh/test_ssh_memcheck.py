"""The host-memory preflight over SSH: MemAvailable read on the host by the probe, a job above
it refused before anything is created there (veri_tui/launch/memcheck.py).

The 'remote' is this machine through the test sshd, so its real memory is the limit; the job is
a header-only 70B-shaped checkpoint, LoRA with cpu_offload (over a hundred GB of host memory
planned).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.synthetic import LLAMA_3_1_70B, add_tokenizer, write_checkpoint

from veri_tui.errors import VeriError
from veri_tui.launch import jobs
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.jobs import launch
from veri_tui.launch.memcheck import local_available
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.preflight import run_preflight
from veri_tui.plan import load_job_config, plan_job
from veri_tui.plan.memory import gb
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_the_probe_reads_the_hosts_memavailable(ssh_env) -> None:
    conn = Connection.open(ssh_env.alias)
    pf = run_preflight(conn, model=str(bundled_tiny_model()), gpu_count=2)
    conn.close()
    here = local_available()
    # The same machine, read a moment apart: the same order of magnitude.
    assert here is not None and 0.5 * here < pf.facts["mem_available_bytes"] < 2 * here


def test_a_job_above_the_hosts_memory_is_refused(ssh_env, tmp_path: Path) -> None:
    model = tmp_path / "llama-70b"
    write_checkpoint(model, LLAMA_3_1_70B)
    add_tokenizer(model)  # a launch refuses a model without one
    # LoRA: the host's disk check wants room for a full fine-tune's copy of the model (141 GB
    # by its headers); the frozen base offloaded still needs about that much host memory.
    sets = ["cpu_offload=true", "lora_rank=8"]
    job = load_job_config(
        None, model=str(model), gpu_count=2, sets=sets, dataset=str(BUNDLED_DATASETS["sft_text"])
    )
    need = plan_job(job).host_bytes_per_node
    with pytest.raises(VeriError) as err:
        launch(job, None, host=ssh_env.alias)
    [line] = err.value.lines()
    assert line.startswith(
        f"error: host_memory: {gb(need)} per node needed (2 ranks x {gb(-(-need // 2))}), "
    ), line
    assert line.endswith(
        f" available on {ssh_env.alias}; use fewer ranks per node, LoRA (lora_rank), or no "
        "cpu_offload"
    )
    assert not (tmp_path / "remote-veri" / "jobs").exists()  # nothing made on the host
    rows = jobs.preflight(job, None, host=ssh_env.alias)
    # MemAvailable moves between two readings: the row says the same up to that figure.
    [(ok, detail)] = [(ok, d) for k, ok, d in rows if k == "host_memory"]
    assert (
        not ok and detail.split(", ")[0] == line.removeprefix("error: host_memory: ").split(", ")[0]
    )
    assert detail.endswith(line.split(" available on ")[1])
