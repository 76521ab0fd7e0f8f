"""The fleet probe's bandwidth verdicts on made-up records (the shape veri_tui/trainer/probe.py
prints), its cache, and the plan that takes the measured network from it. The probe run
for real: tests/ssh/test_probe.py (two sshd) and tests/slurm/test_slurm_probe.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.jobfolder.probe import probe_bandwidth as bandwidth
from veri_tui.jobfolder.probe.probe_verdict import cache_path
from veri_tui.launch.probe.report import (
    ProbeReport,
    hosts_key,
    save,
    with_cached_network,
)
from veri_tui.plan import load_job_config, plan_job
from veri_tui.trainer.probe import bus_factor, delay_of

MiB = 1 << 20


def _res(scope: str, ranks: list[int], nodes: list[int], inside: list[float], busbw: float = 1.0,
         kind: str = "all_reduce", nbytes: int = 4 * MiB) -> dict:  # fmt: skip
    return {
        "scope": scope,
        "ranks": ranks,
        "nodes": nodes,
        "kind": kind,
        "bytes": nbytes,
        "time_s": max(inside),
        "algbw_gbs": busbw,
        "busbw_gbs": busbw,
        "inside_s": inside,
    }


def _record(nodes: int, per_node: int, results: list[dict]) -> dict:
    return {
        "probe": 1,
        "backend": "gloo",
        "device": "cpu",
        "nodes": nodes,
        "iters": 3,
        "ranks_per_node": per_node,
        "world_size": nodes * per_node,
        "results": results,
    }


def test_bus_factors_and_the_delay_knob() -> None:
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 8) == bus_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_factor("all_reduce", 1) == 0.0
    assert delay_of("1:0.25", 1) == 0.25 and delay_of("1:0.25", 0) == 0.0 and delay_of(None, 0) == 0
    with pytest.raises(SystemExit, match="expected NODE:SECONDS"):
        delay_of("slow", 1)


def test_the_node_the_others_wait_for_is_named() -> None:
    # Node 1's ranks arrive last: the others spend ~50 ms inside each collective, it ~2 ms.
    results = [_res("all", [0, 1, 2, 3], [0, 1], [0.052, 0.051, 0.002, 0.003], nbytes=n)
               for n in (MiB, 4 * MiB)]  # fmt: skip
    slow = bandwidth.slow_nodes(_record(2, 2, results))
    assert [(s.node, s.rank) for s in slow] == [(1, None)]
    assert slow[0].why.startswith("the others waited 49 ms for it in each collective (9")


def test_even_waits_name_nobody_and_tiny_lags_are_noise() -> None:
    even = [_res("all", [0, 1], [0, 1], [0.010, 0.011]), _res("all", [0, 1], [0, 1], [0.02, 0.018])]
    assert bandwidth.slow_nodes(_record(2, 1, even)) == []
    tiny = [_res("all", [0, 1], [0, 1], [0.0015, 0.0001])]  # 1.4 ms: below MIN_LAG_S
    assert bandwidth.slow_nodes(_record(2, 1, tiny)) == []


def test_on_one_machine_a_slow_rank_is_named() -> None:
    results = [_res("all", [0, 1, 2, 3], [0], [0.03, 0.03, 0.03, 0.001])]
    slow = bandwidth.slow_nodes(_record(1, 4, results))
    assert [(s.node, s.rank) for s in slow] == [(0, 3)]
    report = ProbeReport("hosts:local", ["this machine"], _record(1, 4, results), [{}])
    assert report.refusals()[0].message.startswith(
        "rank 3 (local rank 3) on this machine is slow: the others waited 29 ms"
    )


def test_a_node_whose_every_link_is_slow_is_named() -> None:
    pairs = [_res("pair", [0, 1], [0, 1], [0.01, 0.01], busbw=0.2),
             _res("pair", [1, 2], [1, 2], [0.01, 0.01], busbw=0.3),
             _res("pair", [2, 0], [2, 0], [0.01, 0.01], busbw=1.0)]  # fmt: skip
    slow = bandwidth.slow_nodes(_record(3, 1, pairs))
    assert [s.node for s in slow] == [1]
    assert slow[0].why == "its links measure 0.300 GB/s at best, the other pairs 1.000 GB/s"


def test_the_network_figure_is_the_across_all_reduce_at_the_largest_size() -> None:
    results = [_res("all", [0, 1, 2, 3], [0, 1], [0.01] * 4, busbw=9.0),
               _res("across", [0, 2], [0, 1], [0.01] * 2, busbw=1.0, nbytes=MiB),
               _res("across", [0, 2], [0, 1], [0.01] * 2, busbw=2.5),
               _res("node", [0, 1], [0], [0.01] * 2, busbw=40.0),
               _res("node", [2, 3], [1], [0.01] * 2, busbw=30.0)]  # fmt: skip
    record = _record(2, 2, results)
    assert bandwidth.internode_gbps(record) == 20.0  # 2.5 GB/s x 8
    assert bandwidth.intranode_busbw(record) == 30.0  # the slower node
    assert bandwidth.internode_gbps(_record(1, 2, results[:1])) is None
    # One rank a node: every rank together is the network.
    assert bandwidth.internode_gbps(_record(2, 1, [_res("all", [0, 1], [0, 1], [0.01] * 2,
                                                        busbw=0.5)])) == 4.0  # fmt: skip


def _two_node_report(gbps: float) -> ProbeReport:
    results = [_res("all", [0, 1], [0, 1], [0.01, 0.01], busbw=gbps / 8)]
    return ProbeReport(hosts_key(["a", "b"]), ["a", "b"], _record(2, 1, results), [{}, {}])


def test_a_plan_on_probed_hosts_uses_the_measured_network(home: Path) -> None:
    save(_two_node_report(3.2))
    job = load_job_config(None, gpu="H100-80GB", gpu_count=16, sets=["hosts=['a','b']",
                                                                    "zero_stage=3"])  # fmt: skip
    measured = plan_job(with_cached_network(job))
    line = next(ln for ln in measured.header_lines if ln.startswith("nodes:"))
    assert "3.2 Gb/s per node across (measured by veri-tui probe, " in line
    assumed = plan_job(job)
    assert measured.throughput["internode_gbps"] == 3.2
    assert measured.throughput["step_time_s"] > assumed.throughput["step_time_s"]  # 3.2 < 25
    # The user's own figure wins; hosts in another order are another set; an old probe is
    # not used.
    theirs = load_job_config(None, gpu="H100-80GB", gpu_count=16,
                             sets=["hosts=['a','b']", "internode_bandwidth_gbps=100"])  # fmt: skip
    assert with_cached_network(theirs) == theirs
    other = load_job_config(None, gpu_count=2, sets=["hosts=['b','a']"])
    assert with_cached_network(other) == other
    path = cache_path(hosts_key(["a", "b"]))
    os.utime(path, (0, 0))
    assert with_cached_network(job) == job


def test_bad_probe_options_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--sizes", "12,x"]) == 2
    assert capsys.readouterr().err.startswith("error: sizes: '12,x': give buffer sizes in bytes")
    assert main(["probe", "--slurm", "--host", "a"]) == 2
    assert "error: slurm: --slurm and --host are two targets" in capsys.readouterr().err
    assert main(["probe", "--nodes", "2"]) == 2
    assert "error: slurm: --partition and --nodes go with --slurm" in capsys.readouterr().err
    assert main(["probe", "--host", "a", "--host", "a"]) == 2
    assert "error: hosts: a host is named twice" in capsys.readouterr().err
