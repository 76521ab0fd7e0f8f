"""Planning a multi-node job: the refusals (each its own `error: <key>:` line), the layout line
in the plan header, and the inter-node bandwidth in the throughput model (NVLink within a
node, the network across nodes). No SSH here: the planning core alone.
"""

from __future__ import annotations

import pytest
from ssh_helpers import cli

from veri_tui.errors import VeriError
from veri_tui.plan import load_job_config, plan_job, validate


def _plan(*sets: str, gpu_count: int | None = 8):
    return plan_job(load_job_config(None, gpu="H100-80GB", gpu_count=gpu_count, sets=list(sets)))


def test_layout_line_names_nodes_and_hosts() -> None:
    rec = _plan("hosts=['a', 'b']")
    assert (
        "nodes: 2 x 4 GPUs (a, b); NVLink within a node, 25 Gb/s per node across "
        "(ethernet default)" in rec.header_lines
    )
    assert not any(ln.startswith("nodes:") for ln in _plan().header_lines)
    ib = _plan("hosts=['a', 'b']", "network=infiniband").header_lines
    assert any("400 Gb/s per node across (infiniband default)" in ln for ln in ib)
    assert any(
        "100 Gb/s per node across (set)" in ln
        for ln in _plan("hosts=['a','b']", "internode_bandwidth_gbps=100").header_lines
    )


def test_crossing_nodes_costs_network_time_and_faster_networks_cost_less() -> None:
    # Sharded (zero_stage 3) on a 0.5B-parameter stand-in: communication is large enough to see.
    args = ("zero_stage=3", "micro_batch_size=1")
    one = _plan(*args).throughput
    eth = _plan("hosts=['a','b']", *args).throughput
    ib = _plan("hosts=['a','b']", "network=infiniband", *args).throughput
    assert eth["nodes"] == 2 and eth["internode_gbps"] == 25.0 and one["internode_gbps"] is None
    assert eth["communication_s"] > ib["communication_s"] > one["communication_s"]
    assert eth["exposed_communication_s"] > ib["exposed_communication_s"]


def test_refusals_each_on_their_own_line() -> None:
    with pytest.raises(VeriError) as err:
        _plan("hosts=['a', 'b', 'a']", gpu_count=4)
    keys = sorted(e.key for e in err.value.errors)
    assert keys == ["gpu_count", "hosts"]
    out = cli("plan", "--gpu-count", "3", "--set", "hosts=['a','b']", "--set", "network=wifi")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert (
        "error: gpu_count: 3 GPUs cannot split over 2 nodes (every node runs the same "
        "number of ranks); use 2 or 4" in lines
    )
    assert any(ln.startswith("error: network: unknown network 'wifi'") for ln in lines)


def test_gpu_count_left_unset_waits_for_the_preflight() -> None:
    # 2 hosts and no gpu_count: detected at the preflight (nodes x GPUs per node), not refused.
    job = load_job_config(None, sets=["hosts=['a','b']"])
    assert any(
        "nodes: 2 x ? GPUs (detected at the preflight) (a, b)" in ln
        for ln in plan_job(job).header_lines
    )


def test_plan_for_two_hosts_states_the_detected_layout(sshd, sshd2, tmp_path) -> None:
    from multinode_helpers import two_node_env

    env = two_node_env(sshd, sshd2, tmp_path)
    out = cli("plan", "--host", sshd.alias, "--host", sshd2.alias, env=env)
    assert out.returncode == 0, out.stderr
    # CPU hosts: one process per node, detected at the preflight.
    assert f"nodes: 2 x 1 GPU ({sshd.alias}, {sshd2.alias})" in out.stdout
    assert "dp=2" in out.stdout
    # A sharding knob without --gpu-count: planned on the detected 2 x 1, not "one GPU".
    out = cli("plan", "--host", sshd.alias, "--host", sshd2.alias, "--set", "zero_stage=3",
              env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"nodes: 2 x 1 GPU ({sshd.alias}, {sshd2.alias})" in out.stdout
    assert "plan: dp=2 zero_stage=3 " in out.stdout


def test_before_the_layout_is_known_a_job_is_checked_as_one_gpu_per_node() -> None:
    two = load_job_config(None, sets=["hosts=['a','b']", "zero_stage=3", "cpu_offload=true"])
    assert validate(two) == []  # sharding over 2 x (at least 1): not refused
    one = load_job_config(None, sets=["zero_stage=3"])
    assert [e.key for e in validate(one)] == ["zero_stage"]  # one host, one GPU: refused
    zero1 = load_job_config(None, sets=["hosts=['a','b']", "zero_stage=1"])
    assert [e.key for e in validate(zero1)] == ["zero_stage"]  # whatever the layout
    dp = load_job_config(None, sets=["hosts=['a','b']", "data_parallel_size=4"])
    assert validate(dp) == []  # 2 x 2 would fit it: left to the plan with the layout
    four = load_job_config(None, gpu_count=2, sets=["hosts=['a','b']", "data_parallel_size=4"])
    assert [e.key for e in validate(four)] == ["data_parallel_size"]
