"""What the Slurm target reads, without a cluster: gres spellings mapped to the GPU catalog,
`scontrol -o` lines as real clusters print them, end states mapped to outcomes, and the
`[slurm]` options checked (the cluster tests cover the same code against a real controller)."""

from __future__ import annotations

import pytest

from veri_tui.errors import VeriError
from veri_tui.launch.slurm.options import slurm_options
from veri_tui.launch.slurm.partition import _summarize, catalog_gpu, fields
from veri_tui.launch.slurm.states import SlurmState, outcome


@pytest.mark.parametrize(
    ("gres", "name"),
    [
        ("h100", "H100-80GB"),
        ("H100_80GB", "H100-80GB"),
        ("h100-sxm5-80gb", "H100-80GB"),
        ("a100_80gb", "A100-80GB"),
        ("a100-40g", "A100-40GB"),
        ("a100", None),
        ("l4", "L4-24GB"),
        ("h200", "H200-141GB"),
        ("b200", "B200-180GB"),
        ("a10g", "A10G-24GB"),
        ("mystery", None),
    ],
)
def test_gres_types_map_to_the_catalog_or_to_nothing(gres: str, name: str | None) -> None:
    assert catalog_gpu(gres) == name


def test_a_partition_is_its_smallest_node_and_one_gpu_type() -> None:
    line = (
        "NodeName=gpu-01 Arch=x86_64 CoresPerSocket=48 CPUTot=96 Gres=gpu:h100:8(S:0-1) "
        "RealMemory=2000000 State=IDLE TRES=cpu=96,mem=2000000M"
    )
    small = line.replace("gpu-01", "gpu-02").replace("CPUTot=96", "CPUTot=64")
    part = _summarize("h100", [fields(line), fields(small)], "login1")
    assert (part.gpu_type, part.gpus_per_node, part.cpus_per_node) == ("h100", 8, 64)
    assert part.memory_bytes == 2000000 * 2**20 and part.nodes == ("gpu-01", "gpu-02")
    other = fields(line.replace("gpu-01", "a-01").replace("h100", "a100_80gb"))
    with pytest.raises(VeriError, match="mixes GPU types"):
        _summarize("mixed", [fields(line), other], "login1")
    cpu = _summarize("cpu", [fields("NodeName=c1 CPUTot=32 Gres=(null) RealMemory=1000")], "x")
    assert (cpu.gpus_per_node, cpu.gpu_type) == (0, None)


@pytest.mark.parametrize(
    ("state", "status", "code", "who"),
    [
        ("TIMEOUT", "failed", "TIME_LIMIT", "customer"),
        ("DEADLINE", "failed", "TIME_LIMIT", "customer"),
        ("OUT_OF_MEMORY", "failed", "HOST_OOM", "customer"),
        ("NODE_FAIL", "failed", "HARDWARE_ERROR", "platform"),
        ("BOOT_FAIL", "failed", "HARDWARE_ERROR", "platform"),
    ],
)
def test_end_states_map_to_outcomes(state: str, status: str, code: str, who: str) -> None:
    got = outcome(SlurmState(7, state), 4)
    assert got is not None and got[1] is not None
    assert (got[0], got[1]["code"], got[1]["attribution"]) == (status, code, who)
    assert got[1]["message"].startswith("Slurm job 7: ")


def test_cancelled_preempted_and_unexplained_ends() -> None:
    assert outcome(SlurmState(7, "CANCELLED"), 2) == ("cancelled", None)
    preempted = outcome(SlurmState(7, "PREEMPTED"), 2)
    assert preempted is not None and (preempted[1] or {}).get("code") == "PREEMPTED"
    assert outcome(SlurmState(7, "FAILED"), 2) is None  # the lost rule's, or the rank's own
    assert outcome(SlurmState(7, "COMPLETED"), 2) is None
    assert SlurmState(7, "PENDING", "Priority").status == "pending"
    assert SlurmState(7, "COMPLETING").alive and not SlurmState(7, "TIMEOUT").alive


def test_slurm_options_refuse_each_bad_value_and_the_command_line_wins() -> None:
    with pytest.raises(VeriError) as bad:
        slurm_options({"login": "l", "nodes": 0, "time": "soon", "gres": "x"}, {})
    assert sorted(e.key for e in bad.value.errors) == ["slurm.gres", "slurm.nodes", "slurm.time"]
    got = slurm_options({"login": "a", "partition": "p", "time": "1:00:00"}, {"partition": "q"})
    assert got is not None and (got.login, got.partition, got.time) == ("a", "q", "1:00:00")
    assert slurm_options(None, {"login": None}) is None
    with pytest.raises(VeriError, match="without a login node"):
        slurm_options({"partition": "p"}, {})
